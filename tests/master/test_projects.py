"""Workspaces and projects (issue #13 item 4): 0.37's routes and wire shapes, experiments filed
into projects (``projectId``, the config's ``workspace``/``project``), listing by project,
moving (one and bulk), archive rules and ownership; on SQLite and PostgreSQL. Our ``det
workspace``/``det project``/``det e move`` commands, and the reference's CLI and SDK against
this master (wire compatibility)."""

from __future__ import annotations

import json
import pathlib
import time

import pytest
import requests
from _kit.cli import Det
from _kit.master import SINGLE_CONFIG, MasterProcess, login
from _kit.reference import Ref

pytestmark = pytest.mark.e2e


def _ok(r: requests.Response) -> dict:
    assert r.status_code == 200, r.text
    return dict(r.json())


def _user(master: MasterProcess, name: str) -> requests.Session:
    admin = master.session()
    _ok(admin.post(master.url + "/api/v1/users", json={"user": {"username": name, "active": True}}))
    return master.session(login(master.url, name))


def _experiment(s: requests.Session, url: str, config: str = SINGLE_CONFIG, **body: object) -> dict:
    got = _ok(
        s.post(url + "/api/v1/experiments", json={"config": config, "activate": False, **body})
    )
    return dict(got["experiment"])


@pytest.mark.both_stores
def test_workspaces_projects_and_experiments_in_them(master: MasterProcess) -> None:
    s, api = master.session(), master.url + "/api/v1"
    [default] = _ok(s.get(api + "/workspaces"))["workspaces"]
    assert (default["id"], default["name"], default["immutable"]) == (1, "Uncategorized", True)
    [uncat] = _ok(s.get(api + "/workspaces/1/projects"))["projects"]
    assert (uncat["id"], uncat["name"], uncat["workspaceName"]) == (
        1,
        "Uncategorized",
        "Uncategorized",
    )

    ws = _ok(s.post(api + "/workspaces", json={"name": "team"}))["workspace"]
    assert ws["numProjects"] == 0 and ws["username"] == "admin" and not ws["archived"]
    assert s.post(api + "/workspaces", json={"name": "team"}).status_code == 409
    assert s.post(api + "/workspaces", json={"name": " "}).status_code == 400
    body = {"name": "vision", "workspaceId": ws["id"], "description": "cnn", "key": "vis"}
    proj = _ok(s.post(api + f"/workspaces/{ws['id']}/projects", json=body))["project"]
    assert (proj["key"], proj["workspaceName"], proj["description"]) == ("VIS", "team", "cnn")
    dup = s.post(api + f"/workspaces/{ws['id']}/projects", json={"name": "vision"})
    assert dup.status_code == 409

    # Created into the project by id, and by the config's names; the default otherwise.
    by_id = _experiment(s, master.url, projectId=proj["id"])
    named = SINGLE_CONFIG + "workspace: team\nproject: vision\n"
    by_config = _experiment(s, master.url, named)
    plain = _experiment(s, master.url)
    for e in (by_id, by_config):
        assert (e["projectId"], e["projectName"]) == (proj["id"], "vision")
        assert (e["workspaceId"], e["workspaceName"]) == (ws["id"], "team")
    assert (plain["projectId"], plain["workspaceName"]) == (1, "Uncategorized")
    half = SINGLE_CONFIG + "workspace: team\n"
    r = s.post(api + "/experiments", json={"config": half})
    assert r.status_code == 400 and "both" in r.json()["message"]
    r = s.post(api + "/experiments", json={"config": SINGLE_CONFIG, "projectId": 999})
    assert r.status_code == 404

    listed = _ok(s.get(api + "/experiments", params={"projectId": proj["id"]}))["experiments"]
    assert [e["id"] for e in listed] == [by_id["id"], by_config["id"]]
    same = _ok(s.get(api + f"/projects/{proj['id']}/experiments"))["experiments"]
    assert [e["id"] for e in same] == [by_id["id"], by_config["id"]]
    got = _ok(s.get(api + f"/projects/{proj['id']}"))["project"]
    assert got["numExperiments"] == 2 and got["numActiveExperiments"] == 2
    assert _ok(s.get(api + f"/workspaces/{ws['id']}"))["workspace"]["numExperiments"] == 2

    # Moves: one, then in bulk back.
    move = {"destinationProjectId": 1, "experimentId": by_id["id"]}
    _ok(s.post(api + f"/experiments/{by_id['id']}/move", json=move))
    assert _ok(s.get(api + f"/experiments/{by_id['id']}"))["experiment"]["projectId"] == 1
    bulk = {
        "projectId": 1,
        "experimentIds": [by_id["id"], plain["id"]],
        "destinationProjectId": proj["id"],
    }
    results = _ok(s.post(api + "/projects/1/experiments/move", json=bulk))["results"]
    assert results == [{"error": "", "id": by_id["id"]}, {"error": "", "id": plain["id"]}]
    assert (
        len(_ok(s.get(api + "/experiments", params={"projectId": proj["id"]}))["experiments"]) == 3
    )
    # By filters: every experiment of the project named "test" goes, then comes back.
    by_filter = {"projectId": proj["id"], "filters": {"name": "test"}, "destinationProjectId": 1}
    moved = _ok(s.post(api + f"/projects/{proj['id']}/experiments/move", json=by_filter))
    assert sorted(r["id"] for r in moved["results"]) == sorted(
        [by_id["id"], by_config["id"], plain["id"]]
    )
    back = {"projectId": 1, "experimentIds": [r["id"] for r in moved["results"]]}
    back["destinationProjectId"] = proj["id"]
    _ok(s.post(api + "/projects/1/experiments/move", json=back))

    # Archived projects take no experiments; non-empty ones are not deleted.
    _ok(s.post(api + f"/projects/{proj['id']}/archive"))
    assert s.post(api + f"/projects/{proj['id']}/archive").status_code == 400
    r = s.post(api + "/experiments", json={"config": SINGLE_CONFIG, "projectId": proj["id"]})
    assert r.status_code == 400 and "archived" in r.json()["message"]
    listed = _ok(s.get(api + f"/experiments/{plain['id']}"))["experiment"]
    assert listed["parentArchived"] is True
    out = {"destinationProjectId": 1, "experimentId": plain["id"]}  # nor let them go (0.37)
    r = s.post(api + f"/experiments/{plain['id']}/move", json=out)
    assert r.status_code == 400 and "cannot have experiments moved from it" in r.text, r.text
    _ok(s.post(api + f"/projects/{proj['id']}/unarchive"))
    r = s.delete(api + f"/projects/{proj['id']}")
    assert r.status_code == 400 and "3 experiment" in r.json()["message"]
    r = s.delete(api + f"/workspaces/{ws['id']}")
    assert r.status_code == 400 and "3 experiment" in r.json()["message"]

    patched = _ok(
        s.patch(api + f"/projects/{proj['id']}", json={"name": "seeing", "description": "d"})
    )
    assert (patched["project"]["name"], patched["project"]["description"]) == ("seeing", "d")
    notes = {"notes": [{"name": "readme", "contents": "hi"}], "projectId": proj["id"]}
    assert _ok(s.put(api + f"/projects/{proj['id']}/notes", json=notes))["notes"] == notes["notes"]
    more = {"name": "todo", "contents": "more"}  # 0.37's AddProjectNote: appended
    added = _ok(s.post(api + f"/projects/{proj['id']}/notes", json=more))["notes"]
    assert added == [*notes["notes"], more]
    assert _ok(s.get(api + f"/projects/{proj['id']}"))["project"]["notes"] == added
    renamed = _ok(s.patch(api + f"/workspaces/{ws['id']}", json={"name": "crew"}))["workspace"]
    assert renamed["name"] == "crew"
    assert (
        _ok(s.get(api + "/workspaces", params={"name": "CREW"}))["workspaces"][0]["id"] == ws["id"]
    )

    # The defaults cannot change, nor take new projects (0.37's words).
    assert s.patch(api + "/workspaces/1", json={"name": "x"}).status_code == 400
    r = s.post(api + "/workspaces/1/projects", json={"name": "more"})
    assert r.status_code == 400, r.text
    assert "workspace (1) is immutable and cannot add new projects" in r.json()["message"]
    assert s.delete(api + "/projects/1").status_code == 400
    assert s.post(api + "/workspaces/1/archive").status_code == 400
    assert s.get(api + "/workspaces/99").status_code == 404
    assert s.get(api + "/projects/99").status_code == 404

    # An empty project and workspace are deleted.
    spare = _ok(s.post(api + f"/workspaces/{ws['id']}/projects", json={"name": "spare"}))
    assert _ok(s.delete(api + f"/projects/{spare['project']['id']}")) == {"completed": True}
    other = _ok(s.post(api + "/workspaces", json={"name": "empty"}))["workspace"]
    _ok(s.post(api + f"/workspaces/{other['id']}/projects", json={"name": "p"}))
    _ok(s.post(api + f"/workspaces/{other['id']}/archive"))
    r = s.post(api + f"/workspaces/{other['id']}/projects", json={"name": "q"})
    assert r.status_code == 400 and "archived" in r.json()["message"]
    assert _ok(s.delete(api + f"/workspaces/{other['id']}")) == {"completed": True}
    assert s.get(api + f"/workspaces/{other['id']}").status_code == 404


def _ended(s: requests.Session, api: str, exp_id: int) -> None:
    _ok(s.post(api + f"/experiments/{exp_id}/kill"))
    for _ in range(100):
        if _ok(s.get(api + f"/experiments/{exp_id}"))["experiment"]["state"] == "STATE_CANCELED":
            return
        time.sleep(0.1)
    raise AssertionError(f"experiment {exp_id} did not end")


def test_a_deleted_project_or_workspace_takes_its_ended_experiments(
    shared_master: MasterProcess,
) -> None:
    """0.37 deletes a project's or workspace's experiments with it (its e2e webhook tests
    delete workspaces that ran experiments); here they must have ended first."""
    s, url = shared_master.session(), shared_master.url
    api = url + "/api/v1"
    ws = _ok(s.post(api + "/workspaces", json={"name": "doomed"}))["workspace"]
    p1, p2 = (
        _ok(s.post(api + f"/workspaces/{ws['id']}/projects", json={"name": n}))["project"]
        for n in ("p1", "p2")
    )
    one = _experiment(s, url, projectId=p1["id"])
    _ended(s, api, one["id"])
    _ok(s.post(api + f"/experiments/{one['id']}/archive"))  # an archived one stays (0.37)
    r = s.post(api + f"/experiments/{one['id']}/move", json={"destinationProjectId": p2["id"]})
    assert r.status_code == 400 and "is archived and cannot be moved" in r.text, r.text
    assert _ok(s.delete(api + f"/projects/{p1['id']}")) == {"completed": True}
    assert s.get(api + f"/experiments/{one['id']}").status_code == 404
    assert s.get(api + f"/projects/{p1['id']}").status_code == 404

    ended, live = (_experiment(s, url, projectId=p2["id"]) for _ in range(2))
    _ended(s, api, ended["id"])
    template = {"name": "t-doomed", "config": {"description": "d"}, "workspaceId": ws["id"]}
    _ok(s.post(api + "/templates/t-doomed", json=template))
    r = s.delete(api + f"/workspaces/{ws['id']}")
    assert r.status_code == 400 and f"not ended ({live['id']})" in r.json()["message"], r.text
    assert s.get(api + f"/experiments/{ended['id']}").status_code == 200  # nothing went
    _ended(s, api, live["id"])
    assert _ok(s.delete(api + f"/workspaces/{ws['id']}")) == {"completed": True}
    for path in (
        f"/workspaces/{ws['id']}",
        f"/projects/{p2['id']}",
        f"/experiments/{ended['id']}",
        f"/experiments/{live['id']}",
        "/templates/t-doomed",
    ):
        assert s.get(api + path).status_code == 404, path


def test_only_owners_and_admins_change_workspaces_projects_and_experiment_homes(
    master: MasterProcess,
) -> None:
    admin, api = master.session(), master.url + "/api/v1"
    bob = _user(master, "bob")
    ws = _ok(admin.post(api + "/workspaces", json={"name": "admins"}))["workspace"]
    proj = _ok(admin.post(api + f"/workspaces/{ws['id']}/projects", json={"name": "p"}))["project"]
    assert bob.patch(api + f"/workspaces/{ws['id']}", json={"name": "mine"}).status_code == 403
    assert bob.delete(api + f"/projects/{proj['id']}").status_code == 403
    assert bob.post(api + f"/projects/{proj['id']}/archive").status_code == 403
    # Anyone creates projects and files their experiments anywhere (no RBAC, as 0.37 OSS).
    own = _ok(bob.post(api + f"/workspaces/{ws['id']}/projects", json={"name": "bobs"}))["project"]
    _ok(bob.patch(api + f"/projects/{own['id']}", json={"description": "mine"}))
    exp = _experiment(admin, master.url, projectId=proj["id"])
    move = {"destinationProjectId": own["id"], "experimentId": exp["id"]}
    assert bob.post(api + f"/experiments/{exp['id']}/move", json=move).status_code == 403
    bulk = {
        "projectId": proj["id"],
        "experimentIds": [exp["id"]],
        "destinationProjectId": own["id"],
    }
    [result] = _ok(bob.post(api + f"/projects/{proj['id']}/experiments/move", json=bulk))["results"]
    assert result["id"] == exp["id"] and "not yours" in result["error"]
    _ok(admin.post(api + f"/experiments/{exp['id']}/move", json=move))


def _write_config(tmp_path: pathlib.Path, extra: str = "") -> pathlib.Path:
    path = tmp_path / "exp.yaml"
    path.write_text(SINGLE_CONFIG + extra)
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    return path


def test_our_cli_workspace_project_and_move(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    det = Det(tmp_path / "home", master.url)
    out = det.ok("workspace", "create", "lab")
    headers = [h.strip() for h in out.splitlines()[0].split("|")]
    assert headers[:3] == ["ID", "Name", "# Projects"]
    assert "Checkpoint Storage Config" in out and " lab " in out
    listed = json.loads(det.ok("workspace", "list", "--json"))
    assert [w["name"] for w in listed] == ["Uncategorized", "lab"]
    assert "Checkpoint Storage Config" not in det.ok("w", "list")
    assert json.loads(det.ok("workspace", "describe", "lab", "--json"))["numProjects"] == 0

    out = det.ok("project", "create", "lab", "nlp", "--description", "text", "--key", "NLP")
    assert "# Active Experiments" in out and "NLP" in out and "text" in out
    projects = json.loads(det.ok("workspace", "list-projects", "lab", "--json"))
    assert [p["name"] for p in projects] == ["nlp"]
    assert " nlp " in det.ok("project", "list", "lab")

    config = _write_config(tmp_path)
    out = det.ok(
        "e",
        "create",
        str(config),
        str(tmp_path / "model"),
        "--paused",
        "--project",
        "nlp",
        "--workspace",
        "lab",
    )
    exp_id = int(out.split("Created experiment ")[1].split()[0])
    exps = json.loads(det.ok("project", "list-experiments", "lab", "nlp", "--json"))
    assert [e["id"] for e in exps] == [exp_id]
    described = det.ok("project", "describe", "lab", "nlp")
    assert "Associated Experiments" in described and str(exp_id) in described
    shown = det.ok("e", "list", "--show_project")
    assert shown.splitlines()[0].split()[:3] == ["Workspace", "|", "Project"]
    assert "lab" in shown and "nlp" in shown

    assert det.ok("e", "move", str(exp_id), "Uncategorized", "Uncategorized").strip() == (
        f'Moved experiment {exp_id} to project "Uncategorized"'
    )
    assert json.loads(det.ok("project", "list-experiments", "lab", "nlp", "--json")) == []

    edited = json.loads(det.ok("project", "edit", "lab", "nlp", "--new_name", "speech", "--json"))
    assert edited["name"] == "speech"
    assert "archived project speech" in det.ok("project", "archive", "lab", "speech")
    assert "un-archived project speech" in det.ok("project", "unarchive", "lab", "speech")
    assert "deleted project speech" in det.ok("project", "delete", "lab", "speech", "--yes")
    assert (
        json.loads(det.ok("workspace", "edit", "lab", "--name", "lab2", "--json"))["name"] == "lab2"
    )
    assert "archived workspace lab2" in det.ok("workspace", "archive", "lab2")
    assert "un-archived workspace lab2" in det.ok("workspace", "unarchive", "lab2")
    assert "deleted workspace lab2" in det.ok("workspace", "delete", "lab2", "--yes")

    missing = det("project", "describe", "nope", "x")
    assert missing.returncode == 1 and 'workspace "nope" not found' in missing.stderr
    r = det("e", "create", str(config), "--project", "ghost")
    assert r.returncode == 1 and 'project "ghost" not found' in r.stderr


def test_reference_cli_and_sdk_read_and_write_workspaces_and_projects(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    ref = Ref(master, tmp_path / "ref")
    ref.det("workspace", "create", "refws")
    ref.det("project", "create", "refws", "refproj", "--description", "from 0.37")
    out = ref.det("workspace", "list")
    assert "refws" in out and "Uncategorized" in out
    assert "refproj" in ref.det("workspace", "list-projects", "refws")
    assert "from 0.37" in ref.det("project", "describe", "refws", "refproj")
    exp = _experiment(master.session(login(master.url, "determined")), master.url)
    assert "Moved experiment" in ref.det("e", "move", str(exp["id"]), "refws", "refproj")
    assert "refproj" in ref.det("e", "list", "--show_project")
    assert "edited" in ref.det("project", "edit", "refws", "refproj", "--description", "edited")

    got = ref.python(
        """
import json, sys
from determined.experimental import client
d = client.Determined(master=sys.argv[1], user="determined", password="")
w = d.create_workspace("sdkws")
p = w.create_project("sdkproj", description="made by the 0.37 SDK")
ws = d.get_workspace("sdkws")
names = [x.name for x in ws.list_projects()]
proj = d.get_workspace("refws").get_project("refproj")
exps = [e.id for e in proj.list_experiments()]
p.set_description("changed")
p.archive()
p.reload()
print(json.dumps({"names": names, "exps": exps, "desc": p.description,
                  "archived": p.archived, "ws": [x.name for x in d.list_workspaces()]}))
"""
    )
    assert got["names"] == ["sdkproj"]
    assert got["exps"] == [exp["id"]]
    assert (got["desc"], got["archived"]) == ("changed", True)
    assert got["ws"] == ["Uncategorized", "refws", "sdkws"]
