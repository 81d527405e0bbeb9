"""The admin's cluster-wide message (issue #20 item 6): 0.37's routes, rules and CLI, shown by
``GET /api/v1/master`` (where the web UI and ``det`` read it) only while it is current; the
reference's CLI sets and reads it too."""

from __future__ import annotations

import datetime
import json
import pathlib

import pytest
import requests
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.reference import REF, Ref

from determined.master.api._cluster_message import parse_go_duration

ROUTE = "/api/v1/master/cluster_message"


def _iso(delta: datetime.timedelta) -> str:
    when = datetime.datetime.now(datetime.timezone.utc) + delta
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("90s", 90), ("1h30m", 5400), ("2.5h", 9000), ("300ms", 0.3), ("1m0.5s", 60.5)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5d", "2w", "-1h", "1h-", "h", "1.2.3s", "10"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


@pytest.mark.e2e
def test_set_get_clear_and_the_rules(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    admin = master.session()
    url = master.url
    assert admin.get(url + ROUTE).json() == {}
    assert "clusterMessage" not in requests.get(url + "/api/v1/master", timeout=10).json()

    # Upcoming: readable by the admin, not shown yet.
    later = {"message": "soon", "startTime": _iso(datetime.timedelta(hours=1)), "duration": "1h"}
    assert admin.put(url + ROUTE, json=later).status_code == 200
    got = admin.get(url + ROUTE).json()["clusterMessage"]
    assert got["message"] == "soon" and got["endTime"] and got["createdTime"]
    assert "clusterMessage" not in requests.get(url + "/api/v1/master", timeout=10).json()

    # A new one replaces it and is current at once.
    assert admin.put(
        url + ROUTE, json={"message": "now", "startTime": _iso(-datetime.timedelta(seconds=5))}
    ).ok
    shown = requests.get(url + "/api/v1/master", timeout=10).json()["clusterMessage"]
    assert shown["message"] == "now" and "endTime" not in shown
    assert requests.get(url + "/info", timeout=10).json()["clusterMessage"]["message"] == "now"

    bad = [
        {"message": "x" * 251},
        {"message": "m", "endTime": _iso(datetime.timedelta(hours=1)), "duration": "1h"},
        {"message": "m", "duration": "5d"},
        {"message": "m", "endTime": _iso(-datetime.timedelta(hours=1))},
        {"message": "m", "startTime": "tomorrow"},
    ]
    for body in bad:
        r = admin.put(url + ROUTE, json=body)
        assert r.status_code == 400 and r.json()["message"], (body, r.text)

    token = requests.post(
        url + "/api/v1/auth/login", json={"username": "determined", "password": ""}, timeout=10
    ).json()["token"]
    as_user = {"Authorization": f"Bearer {token}"}
    r = requests.put(url + ROUTE, json={"message": "mine"}, headers=as_user, timeout=10)
    assert r.status_code == 403

    assert admin.delete(url + ROUTE).ok
    assert admin.get(url + ROUTE).json() == {}
    assert "clusterMessage" not in requests.get(url + "/api/v1/master", timeout=10).json()


@pytest.mark.e2e
def test_det_and_the_reference_cli(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    det = Det(tmp_path / "home", master.url)
    det.ok("user", "login", "admin", input="\n")
    det.ok("master", "cluster-message", "set", "-m", "disk full soon", "-d", "2h")
    got = json.loads(det.ok("master", "cluster-message", "get", "--json"))
    assert got["clusterMessage"]["message"] == "disk full soon"
    listed = det("e", "list")
    assert listed.returncode == 0 and "Cluster message: disk full soon" in listed.stderr
    det.ok("master", "cluster-message", "clear")
    assert json.loads(det.ok("master", "cluster-message", "get", "--json")) == {}
    assert "Cluster message" not in det("e", "list").stderr

    if not (REF / "bin" / "det").exists():
        pytest.skip("no .refvenv: run scripts/setup.sh --tests for the reference CLI's part")
    ref = Ref(master, tmp_path / "ref")
    ref.env.update(DET_USER="admin")
    ref.det("master", "cluster-message", "set", "-m", "from 0.37", "-d", "30m")
    assert "from 0.37" in ref.det("master", "cluster-message", "get")
    ref.det("master", "cluster-message", "clear")
    assert "clusterMessage" not in requests.get(master.url + "/api/v1/master", timeout=10).json()
