"""Project routes of 0.37 (issue #34 item 8): moving a project between workspaces with 0.37's
rules, the experiment table's columns of a project (read with 0.37's own bindings), and the
role routes, which 0.37's open-source master answers 501 (Enterprise Edition only)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess, Run, login
from _kit.reference import Ref

pytestmark = pytest.mark.e2e

_NESTED = """
name: nested
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
hyperparameters:
  global_batch_size: 32
  optimizer: adam
  lr: {type: double, minval: 0.001, maxval: 0.1}
  metrics_base: {min_val: 1.0, max_val: {type: int, minval: 2, maxval: 4}}
"""

_COLUMNS = r"""
import json, sys
from determined.common.api import authentication, bindings
sess = authentication.login(sys.argv[1], "admin", "")
cols = bindings.get_GetProjectColumns(sess, id=1).columns
ranges = bindings.get_GetProjectNumericMetricsRange(sess, id=1).ranges or []
print(json.dumps({
    "columns": [[c.column, c.location.value, c.type.value] for c in cols],
    "ranges": {r.metricsName: [r.min, r.max] for r in ranges},
}))
"""


def _ok(r: requests.Response) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def test_move_project_rules(shared_master: MasterProcess) -> None:
    api, s = shared_master.url + "/api/v1", shared_master.session()
    a = _ok(s.post(api + "/workspaces", json={"name": "move-a"}))["workspace"]["id"]
    b = _ok(s.post(api + "/workspaces", json={"name": "move-b"}))["workspace"]["id"]
    p = _ok(s.post(api + f"/workspaces/{a}/projects", json={"name": "p"}))["project"]["id"]

    def move(project: int, to: int, session: requests.Session = s) -> requests.Response:
        body = {"destinationWorkspaceId": to, "projectId": project}
        return session.post(api + f"/projects/{project}/move", json=body)

    _ok(move(p, b))
    assert _ok(s.get(api + f"/projects/{p}"))["project"]["workspaceId"] == b
    # Not into the default workspace, not the default project, not into an archived one.
    assert "default workspace" in move(p, 1).json()["message"]
    assert move(1, a).status_code == 400
    _ok(s.post(api + f"/workspaces/{a}/archive"))
    assert "archived" in move(p, a).json()["message"]
    _ok(s.post(api + f"/workspaces/{a}/unarchive"))
    # An archived project is neither moved nor edited; under an archived workspace it shows
    # as archived.
    _ok(s.post(api + f"/projects/{p}/archive"))
    assert "archived" in move(p, a).json()["message"]
    r = s.patch(api + f"/projects/{p}", json={"name": "q"})
    assert r.status_code == 400 and "archived" in r.json()["message"]
    _ok(s.post(api + f"/projects/{p}/unarchive"))
    _ok(s.post(api + f"/workspaces/{b}/archive"))
    assert _ok(s.get(api + f"/projects/{p}"))["project"]["archived"] is True
    assert "archived" in move(p, a).json()["message"]
    _ok(s.post(api + f"/workspaces/{b}/unarchive"))
    # A name already in the destination; someone else's project.
    _ok(s.post(api + f"/workspaces/{a}/projects", json={"name": "p"}))
    assert move(p, a).status_code == 409
    _ok(s.post(api + "/users", json={"user": {"username": "mover"}, "password": ""}))
    mover = requests.Session()
    mover.headers["Authorization"] = "Bearer " + login(shared_master.url, "mover")
    r = move(p, a, mover)
    assert r.status_code == 403 and "someone else owns" in r.json()["message"]
    assert move(99999, a).status_code == 404


def test_names_sort_as_0_37s_collation(shared_master: MasterProcess) -> None:
    """0.37's Postgres sorts names by en_US collation: case and punctuation ignored."""
    api, s = shared_master.url + "/api/v1", shared_master.session()
    mine = ["Zeta", "_TestWS", "alpha"]
    for name in mine:
        _ok(s.post(api + "/workspaces", json={"name": name}))
    listed = _ok(s.get(api + "/workspaces", params={"sortBy": "SORT_BY_NAME"}))["workspaces"]
    assert [w["name"] for w in listed if w["name"] in mine] == ["alpha", "_TestWS", "Zeta"]


def test_workspace_pins(shared_master: MasterProcess) -> None:
    """A creator's new workspace is pinned for them (0.37); pin/unpin are per user."""
    api, s = shared_master.url + "/api/v1", shared_master.session()
    ws = _ok(s.post(api + "/workspaces", json={"name": "pinned-one"}))["workspace"]
    assert ws["pinned"] is True

    def pinned(session: requests.Session) -> list[int]:
        got = _ok(session.get(api + "/workspaces", params={"pinned": "true"}))["workspaces"]
        return [w["id"] for w in got]

    assert ws["id"] in pinned(s) and 1 not in pinned(s)
    _ok(s.post(api + f"/workspaces/{ws['id']}/unpin"))
    assert ws["id"] not in pinned(s)
    assert _ok(s.get(api + f"/workspaces/{ws['id']}"))["workspace"]["pinned"] is False
    _ok(s.post(api + f"/workspaces/{ws['id']}/pin"))
    assert ws["id"] in pinned(s)
    _ok(s.post(api + "/users", json={"user": {"username": "pinless"}, "password": ""}))
    other = requests.Session()
    other.headers["Authorization"] = "Bearer " + login(shared_master.url, "pinless")
    assert pinned(other) == []
    assert s.post(api + "/workspaces/99999/pin").status_code == 404


def test_project_columns_with_the_reference_bindings(
    shared_master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    run = Run(shared_master, _NESTED)
    reported = {"validation_error": 0.5, "loss": 0.25, "note": "x"}
    assert run.metrics("validation", 5, reported).status_code == 200
    out = Ref(shared_master, tmp_path / "ref").python(_COLUMNS)
    got = out["columns"]
    columns = {c[0]: (c[1], c[2]) for c in got}
    assert got[0] == ["id", "LOCATION_TYPE_EXPERIMENT", "COLUMN_TYPE_NUMBER"]
    for hp in ("global_batch_size", "lr", "metrics_base.min_val", "metrics_base.max_val"):
        assert columns["hp." + hp] == ("LOCATION_TYPE_HYPERPARAMETERS", "COLUMN_TYPE_NUMBER")
    assert columns["hp.optimizer"][1] == "COLUMN_TYPE_TEXT"
    for agg in ("min", "max", "last", "mean"):
        assert columns[f"validation.validation_error.{agg}"] == (
            "LOCATION_TYPE_VALIDATIONS",
            "COLUMN_TYPE_NUMBER",
        )
    assert columns["validation.note.last"][1] == "COLUMN_TYPE_TEXT"
    assert "validation.note.max" not in columns
    # The ranges over each experiment's best trial (0.37's metric-ranges): numbers only.
    assert out["ranges"]["validation.validation_error.min"] == [0.5, 0.5]
    assert out["ranges"]["searcherMetricsVal"] == [0.25, 0.25]
    assert not [name for name in out["ranges"] if ".note." in name]
    s = shared_master.session()
    assert s.get(shared_master.url + "/api/v1/projects/99999/columns").status_code == 404


def test_role_routes_answer_enterprise_only(shared_master: MasterProcess) -> None:
    s = shared_master.session()
    for method, path in (
        ("post", "/roles/search"),
        ("post", "/roles/search/by-assignability"),
        ("get", "/roles/search/by-user/1"),
        ("get", "/permissions/summary"),
    ):
        r = s.request(method, shared_master.url + "/api/v1" + path, json={"limit": 500})
        assert r.status_code == 501, (path, r.text)
        assert r.json()["message"] == (
            "Determined Enterprise Edition is required for this functionality"
        )
