"""The model registry (issue #13 item 3): 0.37's ``/api/v1/models`` routes and shapes on SQLite
and PostgreSQL, registered checkpoints kept from deletion and from GC, our ``det model``
commands, and the reference's CLI and SDK registering and reading versions on this master."""

from __future__ import annotations

import json
import pathlib
import time
import uuid

import pytest
import requests
from _kit.cli import Det
from _kit.master import MasterProcess, Run, login
from _kit.reference import Ref
from _kit.trial_cluster import GC_PY, Cluster, config

pytestmark = pytest.mark.e2e


def _ok(r: requests.Response) -> dict:
    assert r.status_code == 200, r.text
    return dict(r.json())


def _checkpoint(run: Run, steps: int) -> str:
    """A COMPLETED checkpoint of the run's trial, with a validation at the same step."""
    assert run.metrics("validation", steps, {"loss": 1.0 / steps}).status_code == 200
    body = {
        "uuid": str(uuid.uuid4()),
        "taskId": run.task_id,
        "allocationId": run.allocation_id,
        "reportTime": "2024-05-06T07:08:09Z",
        "resources": {"model.pt": "10"},
        "metadata": {"steps_completed": steps},
    }
    assert run.post("/api/v1/checkpoints", json=body).status_code == 200
    return str(body["uuid"])


@pytest.mark.both_stores
def test_models_and_versions_over_rest(master: MasterProcess) -> None:
    s, api = master.session(), master.url + "/api/v1"
    run = Run(master)
    first, second = _checkpoint(run, 5), _checkpoint(run, 10)

    body = {
        "name": "mnist",
        "description": "digits",
        "labels": ["cv", "cv", "prod"],
        "metadata": {"a": 1},
    }
    model = _ok(s.post(api + "/models", json=body))["model"]
    assert (model["name"], model["labels"], model["metadata"]) == (
        "mnist",
        ["cv", "prod"],
        {"a": 1},
    )
    assert (model["workspaceId"], model["numVersions"], model["username"]) == (1, 0, "admin")
    assert s.post(api + "/models", json={"name": "mnist"}).status_code == 409
    assert s.post(api + "/models", json={"name": "123"}).status_code == 400
    assert s.post(api + "/models", json={"name": ""}).status_code == 400
    ws = _ok(s.post(api + "/workspaces", json={"name": "reg"}))["workspace"]
    other = _ok(s.post(api + "/models", json={"name": "other", "workspaceName": "reg"}))["model"]
    assert other["workspaceId"] == ws["id"]

    # By name or by id; listing filters and sorts.
    assert _ok(s.get(api + f"/models/{model['id']}"))["model"]["name"] == "mnist"
    assert s.get(api + "/models/nope").status_code == 404
    names = lambda **q: [m["name"] for m in _ok(s.get(api + "/models", params=q))["models"]]  # noqa: E731
    assert names() == ["mnist", "other"]
    assert names(name="NIS") == ["mnist"]
    assert names(labels=["cv"]) == ["mnist"]
    assert names(workspaceNames=["reg"]) == ["other"]
    assert names(sortBy="SORT_BY_NAME", orderBy="ORDER_BY_DESC") == ["other", "mnist"]
    assert _ok(s.get(api + "/model/labels"))["labels"] == ["cv", "prod"]

    v1 = _ok(
        s.post(api + "/models/mnist/versions", json={"checkpointUuid": first, "modelName": "mnist"})
    )
    v2 = _ok(
        s.post(
            api + f"/models/{model['id']}/versions", json={"checkpointUuid": second, "name": "best"}
        )
    )
    assert (v1["modelVersion"]["version"], v2["modelVersion"]["version"]) == (1, 2)
    version = v2["modelVersion"]
    assert version["checkpoint"]["uuid"] == second and version["name"] == "best"
    assert version["checkpoint"]["training"]["validationMetrics"]["avgMetrics"] == {"loss": 0.1}
    assert version["model"]["numVersions"] == 2
    listed = _ok(
        s.get(api + "/models/mnist/versions", params={"orderBy": "ORDER_BY_DESC", "limit": 1})
    )
    assert [v["version"] for v in listed["modelVersions"]] == [2]
    assert listed["pagination"]["total"] == 2 and listed["model"]["name"] == "mnist"
    patch = {"comment": "c", "notes": "n", "labels": ["x"], "metadata": {"k": "v"}}
    patched = _ok(s.patch(api + "/models/mnist/versions/2", json=patch))["modelVersion"]
    assert {k: patched[k] for k in patch} == patch
    assert _ok(s.get(api + "/models/mnist/versions/2"))["modelVersion"]["notes"] == "n"
    assert s.get(api + "/models/mnist/versions/9").status_code == 404
    r = s.post(api + "/models/mnist/versions", json={"checkpointUuid": "missing"})
    assert r.status_code == 404

    # A registered checkpoint is not deleted, nor is its experiment.
    r = s.delete(api + "/checkpoints", json={"checkpointUuids": [first]})
    assert r.status_code == 400 and "registered as model versions" in r.json()["message"]
    run.exit(0)
    _ok(s.post(api + f"/experiments/{run.experiment_id}/kill"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = _ok(s.get(api + f"/experiments/{run.experiment_id}"))["experiment"]["state"]
        if state in ("STATE_CANCELED", "STATE_COMPLETED", "STATE_ERROR"):
            break
        time.sleep(0.1)
    r = s.delete(api + f"/experiments/{run.experiment_id}")
    assert r.status_code == 400 and "registered as model versions" in r.json()["message"]

    patched_model = {
        "name": "digits",
        "description": "d2",
        "notes": "nn",
        "labels": ["z"],
        "metadata": {"b": 2},
    }
    got = _ok(s.patch(api + "/models/mnist", json=patched_model))["model"]
    assert {k: got[k] for k in patched_model} == patched_model
    _ok(s.post(api + "/models/digits/archive"))
    r = s.post(api + "/models/digits/versions", json={"checkpointUuid": first})
    assert r.status_code == 400 and "archived" in r.json()["message"]
    assert names(archived="false") == ["other"]
    _ok(s.post(api + "/models/digits/unarchive"))
    _ok(
        s.post(
            api + "/models/digits/move",
            json={"destinationWorkspaceId": ws["id"], "modelName": "digits"},
        )
    )
    assert _ok(s.get(api + "/models/digits"))["model"]["workspaceId"] == ws["id"]
    r = s.delete(api + f"/workspaces/{ws['id']}")
    assert r.status_code == 400 and "2 model" in r.json()["message"]

    _ok(s.delete(api + "/models/digits/versions/1"))
    assert [v["version"] for v in _ok(s.get(api + "/models/digits/versions"))["modelVersions"]] == [
        2
    ]
    _ok(s.delete(api + "/models/digits"))
    assert s.get(api + "/models/digits").status_code == 404
    _ok(s.delete(api + "/checkpoints", json={"checkpointUuids": [first]}))


def test_only_owners_and_admins_change_models(master: MasterProcess) -> None:
    admin, api = master.session(), master.url + "/api/v1"
    _ok(admin.post(api + "/users", json={"user": {"username": "eve", "active": True}}))
    eve = master.session(login(master.url, "eve"))
    run = Run(master)
    ckpt = _checkpoint(run, 1)
    _ok(admin.post(api + "/models", json={"name": "owned"}))
    assert eve.patch(api + "/models/owned", json={"description": "mine"}).status_code == 403
    assert eve.delete(api + "/models/owned").status_code == 403
    assert eve.post(api + "/models/owned/archive").status_code == 403
    # Anyone registers and reads versions; a version is its creator's to change.
    _ok(eve.post(api + "/models/owned/versions", json={"checkpointUuid": ckpt}))
    _ok(eve.patch(api + "/models/owned/versions/1", json={"comment": "eve's"}))
    _ok(admin.post(api + "/models/owned/versions", json={"checkpointUuid": ckpt}))
    assert eve.delete(api + "/models/owned/versions/2").status_code == 403
    _ok(eve.delete(api + "/models/owned/versions/1"))


def test_gc_never_deletes_a_registered_checkpoint(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    storage = tmp_path / "ckpts"
    cfg = config(tmp_path / "out", max_length=3, losses=[3.0, 1.0, 2.0])
    cfg["entrypoint"] = "python3 gc.py"
    cfg["checkpoint_storage"] = {
        "type": "shared_fs",
        "host_path": str(storage),
        "save_experiment_best": 0,
        "save_trial_best": 0,
        "save_trial_latest": 3,
    }
    exp_id = cluster.create(cfg, {"gc.py": GC_PY})
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    rows = cluster.get(f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    by_step = {c["metadata"]["steps_completed"]: c["uuid"] for c in rows}
    assert sorted(by_step) == [1, 2, 3]
    s, api = cluster.s, cluster.url + "/api/v1"
    _ok(s.post(api + "/models", json={"name": "keep"}))
    _ok(s.post(api + "/models/keep/versions", json={"checkpointUuid": by_step[1]}))

    # A policy that keeps nothing: GC runs at once and spares the registered one.
    policy = {
        "checkpointStorage": {"saveExperimentBest": 0, "saveTrialBest": 0, "saveTrialLatest": 0}
    }
    _ok(s.patch(api + f"/experiments/{exp_id}", json=policy))

    def states() -> dict[int, str]:
        rows = cluster.get(f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
        return {c["metadata"]["steps_completed"]: c["state"] for c in rows}

    deadline = time.monotonic() + 15
    while list(states().values()).count("STATE_DELETED") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert states() == {1: "STATE_COMPLETED", 2: "STATE_DELETED", 3: "STATE_DELETED"}
    assert (storage / by_step[1] / "metadata.json").exists()
    assert not (storage / by_step[2]).exists()
    version = _ok(s.get(api + "/models/keep/versions/1"))["modelVersion"]
    assert version["checkpoint"]["state"] == "STATE_COMPLETED"


def test_our_cli_model_commands(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    run = Run(master)
    ckpt = _checkpoint(run, 7)
    det = Det(tmp_path / "home", master.url)
    det.ok("workspace", "create", "zoo")
    out = det.ok("model", "create", "resnet", "--description", "imagenet", "-w", "zoo")
    headers = [h.strip() for h in out.splitlines()[0].split("|")]
    assert headers == [
        "ID",
        "Name",
        "Description",
        "Workspace ID",
        "Creation Time",
        "Last Updated Time",
        "Metadata",
    ]
    assert "imagenet" in out
    made = json.loads(det.ok("model", "create", "bert", "--json"))
    assert set(made) == {
        "name",
        "id",
        "description",
        "creation_time",
        "last_updated_time",
        "metadata",
        "archived",
    }
    listed = json.loads(det.ok("model", "list", "--json", "--sort-by", "name"))
    assert [m["name"] for m in listed] == ["bert", "resnet"]
    assert [m["name"] for m in json.loads(det.ok("model", "list", "-w", "zoo", "--json"))] == [
        "resnet"
    ]
    assert " resnet " in det.ok("m", "ls")

    out = det.ok("model", "register-version", "resnet", ckpt)
    assert "Version #" in out and ckpt in out and '"loss": ' in out
    reg = json.loads(det.ok("model", "register-version", "resnet", ckpt, "--json"))
    assert reg["modelVersion"]["version"] == 2
    versions = json.loads(det.ok("model", "list-versions", "resnet", "--json"))
    assert [v["version"] for v in versions["modelVersions"]] == [1, 2]
    table = det.ok("model", "list-versions", "resnet")
    rows = table[table.index("Version #") :].splitlines()[2:]
    assert [int(r.split("|")[0]) for r in rows if r.split("|")[0].strip()] == [2, 1]  # as 0.37
    described = det.ok("model", "describe", "resnet", "--version", "1")
    assert ckpt in described and "Version #" in described
    assert json.loads(det.ok("model", "describe", "resnet", "--json"))["name"] == "resnet"
    det.ok("model", "move", "resnet", "-w", "Uncategorized")
    assert json.loads(det.ok("model", "list", "-w", "zoo", "--json")) == []

    det.ok("user", "login", "admin", input="\n")  # the checkpoint's owner
    refused = det("checkpoint", "delete", ckpt, "--yes")
    assert refused.returncode == 1 and "registered as model versions" in refused.stderr
    det.ok("model", "delete", "resnet")
    assert [m["name"] for m in json.loads(det.ok("model", "list", "--json"))] == ["bert"]
    missing = det("model", "describe", "resnet")
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_reference_cli_and_sdk_use_the_registry(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    run = Run(master)
    ckpt = _checkpoint(run, 3)
    ref = Ref(master, tmp_path / "ref")
    ref.det("model", "create", "refmodel", "--description", "from 0.37")
    assert ckpt in ref.det("model", "register-version", "refmodel", ckpt)
    assert "refmodel" in ref.det("model", "list")
    assert ckpt in ref.det("model", "list-versions", "refmodel")
    assert ckpt in ref.det("model", "describe", "refmodel")

    got = ref.python(
        """
import json, sys
from determined.experimental import client
d = client.Determined(master=sys.argv[1], user="determined", password="")
m = d.create_model("sdkmodel", description="sdk", labels=["a"], metadata={"k": 1})
v = m.register_version(sys.argv[2])
v.set_name("first")
v.set_notes("notes")
m.add_metadata({"more": 2})
m.set_labels(["b", "c"])
again = d.get_model("sdkmodel")
latest = again.get_version()
versions = again.list_versions()
models = [x.name for x in d.list_models()]
ck = latest.checkpoint
print(json.dumps({
    "version": latest.model_version, "name": latest.name, "notes": latest.notes,
    "uuid": ck.uuid, "trial": ck.training.trial_id, "metadata": again.metadata,
    "labels": again.labels, "n": len(versions), "models": models,
    "by_id": d.get_model(again.model_id).name,
}))
m.archive()
m.unarchive()
v.delete()
m.delete()
""",
        ckpt,
    )
    assert got["version"] == 1 and (got["name"], got["notes"]) == ("first", "notes")
    assert got["uuid"] == ckpt and got["trial"] == run.trial_id
    assert got["metadata"] == {"k": 1, "more": 2} and got["labels"] == ["b", "c"]
    assert got["n"] == 1 and got["models"] == ["refmodel", "sdkmodel"]
    assert got["by_id"] == "sdkmodel"
    assert master.session().get(master.url + "/api/v1/models/sdkmodel").status_code == 404
