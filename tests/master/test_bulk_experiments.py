"""Bulk experiment actions (issue #20 item 4): 0.37's ``/api/v1/projects/{id}/experiments/...``
routes by ids and by filters, one result per experiment, each through its own route's checks."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
import yaml
from _kit.master import MasterProcess

pytestmark = pytest.mark.e2e

BASE = "/api/v1/projects/1/experiments"


def _create(s: requests.Session, url: str, name: str, labels: list[str]) -> int:
    config = {
        "name": name,
        "labels": labels,
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": 1},
    }
    r = s.post(url + "/api/v1/experiments", json={"config": yaml.safe_dump(config)})
    assert r.status_code == 200, r.text
    return int(r.json()["experiment"]["id"])


def _state(s: requests.Session, url: str, exp_id: int) -> str:
    return str(s.get(url + f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"])


def _results(r: requests.Response) -> dict[int, str]:
    assert r.status_code == 200, r.text
    return {int(x["id"]): x["error"] for x in r.json()["results"]}


def _wait(s: requests.Session, url: str, exp_id: int, state: str) -> None:
    deadline = time.monotonic() + 20
    while _state(s, url, exp_id) != state:
        assert time.monotonic() < deadline, _state(s, url, exp_id)
        time.sleep(0.05)


def test_bulk_actions_by_ids_and_filters(master: MasterProcess) -> None:
    s, url = master.session(), master.url
    a = _create(s, url, "bulk-a", ["x"])
    b = _create(s, url, "bulk-b", ["x", "y"])
    c = _create(s, url, "other", ["y"])

    got = _results(s.post(url + BASE + "/pause", json={"experimentIds": [a, b, 999]}))
    assert got[a] == got[b] == "" and "999" in got[999] and "not found" in got[999]
    assert _state(s, url, a) == _state(s, url, b) == "STATE_PAUSED"

    # Filters replace the ids; activate's default state filter is PAUSED (c is not).
    body: dict[str, Any] = {"experimentIds": [c], "filters": {"name": "BULK"}}
    assert _results(s.post(url + BASE + "/activate", json=body)) == {a: "", b: ""}

    # Project -1 is every project (0.37's GlobalProjectID, which its e2e helpers send).
    body = {"filters": {"name": "bulk-b"}}
    assert _results(s.post(url + "/api/v1/projects/-1/experiments/pause", json=body)) == {b: ""}
    assert _results(s.post(url + "/api/v1/projects/-1/experiments/activate", json=body)) == {b: ""}

    # Kill the ones labelled x except b.
    body = {"filters": {"labels": ["x"], "excludedExperimentIds": [b]}}
    assert _results(s.post(url + BASE + "/kill", json=body)) == {a: ""}
    _wait(s, url, a, "STATE_CANCELED")
    assert _state(s, url, b) != "STATE_CANCELED"

    # Archive by filter: only ended experiments by default.
    assert _results(s.post(url + BASE + "/archive", json={"filters": {}})) == {a: ""}
    again = _results(s.post(url + BASE + "/archive", json={"experimentIds": [a, c]}))
    assert again[a] and again[c]  # already archived; not ended: both say why
    assert _results(s.post(url + BASE + "/unarchive", json={"experimentIds": [a]})) == {a: ""}

    # Another user's experiments: each result carries the single route's refusal.
    token = requests.post(
        url + "/api/v1/auth/login", json={"username": "determined", "password": ""}, timeout=10
    ).json()["token"]
    r = requests.delete(
        url + BASE + "/delete",
        json={"experimentIds": [a]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert "not yours" in _results(r)[a]

    assert _results(s.delete(url + BASE + "/delete", json={"experimentIds": [a]})) == {a: ""}
    assert s.get(url + f"/api/v1/experiments/{a}").status_code == 404
    assert _results(s.post(url + BASE + "/cancel", json={"filters": {"states": ["ACTIVE"]}})) == {
        b: "",
        c: "",
    }
