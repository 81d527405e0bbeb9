"""determined/master/api/_experiment_edits.py, checkpoint deletion and the search preview, over
HTTP against a real master whose local resource manager ran a real trial."""

from __future__ import annotations

import base64
import io
import pathlib
import tarfile
from collections.abc import Iterator

import pytest
import requests
from _kit.master import MasterProcess, login
from _kit.trial_cluster import TRAIN_PY, Cluster, config

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, int, pathlib.Path]]:
    """A master and one COMPLETED experiment (checkpoints at steps 2 and 3, both kept)."""
    root = tmp_path_factory.mktemp("edits")
    master = MasterProcess(root / "master", cpu_slots=1)
    master.start()
    cluster = Cluster(master)
    cfg = config(root / "out", max_length=3, ckpt_every=2)
    cfg["checkpoint_storage"] = {
        "type": "shared_fs",
        "host_path": str(root / "ckpts"),
        "save_trial_latest": 5,
    }
    exp_id = cluster.create(cfg)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
    yield cluster, exp_id, root / "ckpts"
    master.stop()


def _paused(cluster: Cluster) -> int:
    """A non-terminal experiment that runs nothing."""
    return cluster.create(config(pathlib.Path("/nonexistent")), activate=False)


def _error(r: requests.Response, status: int, text: str) -> None:
    assert r.status_code == status, r.text
    assert text in r.json()["message"], r.text


def test_archive_and_unarchive(done: tuple[Cluster, int, pathlib.Path]) -> None:
    cluster, exp_id, _ = done
    paused = _paused(cluster)
    _error(cluster.post(f"/api/v1/experiments/{paused}/archive"), 400, "not in terminal state")
    _error(cluster.post(f"/api/v1/experiments/{exp_id}/unarchive"), 400, "is not archived")
    assert cluster.post(f"/api/v1/experiments/{exp_id}/archive").json() == {}
    _error(cluster.post(f"/api/v1/experiments/{exp_id}/archive"), 400, "already archived")
    assert cluster.experiment(exp_id)["archived"] is True
    listed = cluster.get("/api/v1/experiments?archived=false")["experiments"]
    assert exp_id not in [e["id"] for e in listed] and paused in [e["id"] for e in listed]
    assert cluster.post(f"/api/v1/experiments/{exp_id}/unarchive").json() == {}
    assert cluster.experiment(exp_id)["archived"] is False
    _error(cluster.post("/api/v1/experiments/999999/archive"), 404, "not found")


def test_patch_fields_and_labels(done: tuple[Cluster, int, pathlib.Path]) -> None:
    cluster, exp_id, _ = done
    url = cluster.url + f"/api/v1/experiments/{exp_id}"
    body = {"id": exp_id, "name": "renamed", "description": "why", "notes": "# n", "labels": ["x"]}
    patched = cluster.s.patch(url, json=body).json()["experiment"]
    assert (patched["name"], patched["description"], patched["notes"]) == ("renamed", "why", "# n")
    assert patched["labels"] == ["x"] and patched["config"]["name"] == "renamed"
    # only the fields present change
    again = cluster.s.patch(url, json={"id": exp_id, "description": "d2"}).json()["experiment"]
    assert (again["name"], again["description"], again["labels"]) == ("renamed", "d2", ["x"])
    assert cluster.s.put(url + "/labels/y").json() == {"labels": ["x", "y"]}
    assert cluster.s.put(url + "/labels/y").json() == {"labels": ["x", "y"]}  # no duplicate
    assert cluster.s.delete(url + "/labels/x").json() == {"labels": ["y"]}
    assert cluster.experiment(exp_id)["labels"] == ["y"]
    _error(cluster.s.patch(url, json={"name": "  "}), 400, "`name` must not be an empty")
    _error(cluster.s.patch(url, json={"id": exp_id + 1, "name": "n"}), 400, "does not match")
    r = cluster.s.patch(url, json={"resources": {"maxSlots": 2, "priority": 7}})
    assert r.json()["experiment"]["config"]["resources"]["max_slots"] == 2
    _error(cluster.s.patch(url, json={"resources": {"gpus": 2}}), 400, "unknown field 'gpus'")
    assert cluster.experiment(exp_id)["name"] == "renamed"


def test_model_def(done: tuple[Cluster, int, pathlib.Path]) -> None:
    cluster, exp_id, _ = done
    body = cluster.get(f"/api/v1/experiments/{exp_id}/model_def")
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["b64Tgz"])), mode="r:gz") as tar:
        member = tar.extractfile("train.py")
        assert member is not None and member.read().decode() == TRAIN_PY
    r = cluster.s.get(cluster.url + "/api/v1/experiments/999999/model_def")
    assert r.status_code == 404


def _checkpoints(cluster: Cluster, exp_id: int) -> dict[int, tuple[str, str]]:
    rows = cluster.get(f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    return {c["metadata"]["steps_completed"]: (c["uuid"], c["state"]) for c in rows}


def test_delete_checkpoints(done: tuple[Cluster, int, pathlib.Path]) -> None:
    cluster, exp_id, storage = done
    ckpts = _checkpoints(cluster, exp_id)
    (first, _), (last, _) = ckpts[2], ckpts[3]
    assert (storage / first).is_dir()
    url = cluster.url + "/api/v1/checkpoints"
    r = cluster.s.delete(url, json={"checkpointUuids": [first, "no-such-uuid"]})
    _error(r, 404, "no-such-uuid")
    assert (storage / first).is_dir()  # nothing deleted when one uuid is unknown
    assert cluster.s.delete(url, json={"checkpointUuids": [first]}).json() == {}
    assert not (storage / first).exists() and (storage / last).is_dir()
    assert _checkpoints(cluster, exp_id)[2] == (first, "STATE_DELETED")
    assert cluster.s.delete(url, json={"checkpointUuids": [first]}).status_code == 200
    assert cluster.experiment(exp_id)["checkpointCount"] == 1


def test_preview(done: tuple[Cluster, int, pathlib.Path]) -> None:
    cluster, _, _ = done
    cfg = {
        "searcher": {"name": "grid", "metric": "loss", "max_length": 50},
        "hyperparameters": {"lr": {"type": "categorical", "vals": [1, 2, 3]}},
    }
    legacy = cluster.s.post(cluster.url + "/searcher/preview", json=cfg).json()
    assert legacy["results"] == {"50": 3} and isinstance(legacy["seed"], int)
    sim = cluster.s.post(cluster.url + "/api/v1/preview-hp-search", json={"config": cfg}).json()
    train, validate = {"type": "RUNNABLE_TYPE_TRAIN", "length": "50"}, "RUNNABLE_TYPE_VALIDATE"
    assert sim["simulation"]["trials"] == [
        {"operations": [train, {"type": validate, "length": "0"}], "occurrences": 3}
    ]  # 0.37's v1TrialSimulation of v1RunnableOperation
    r = cluster.s.post(cluster.url + "/searcher/preview", json={"name": "x"})
    _error(r, 400, "'searcher' section")
    r = cluster.s.post(cluster.url + "/searcher/preview", json={**cfg, "searcher": {"name": "?"}})
    assert r.status_code == 400


def test_delete_experiment(done: tuple[Cluster, int, pathlib.Path]) -> None:
    cluster, exp_id, storage = done
    paused = _paused(cluster)
    url = cluster.url + "/api/v1/experiments/"
    _error(cluster.s.delete(url + str(paused)), 400, f"cannot delete experiment {paused}")
    user = requests.Session()
    user.headers["Authorization"] = "Bearer " + login(cluster.url, "determined")
    _error(user.delete(url + str(exp_id)), 403, "only its owner or an admin")
    [trial] = cluster.trials(exp_id)
    [(last, _)] = [v for v in _checkpoints(cluster, exp_id).values() if v[1] != "STATE_DELETED"]
    tb = storage / cluster.get("/info")["clusterId"] / "tensorboard" / "experiment" / str(exp_id)
    assert list(tb.rglob("events.out.tfevents.*")), "the trial synced no TensorBoard files"
    assert cluster.s.delete(url + f"{exp_id}/tensorboard-files").json() == {}
    assert not tb.exists()
    (tb / "trial" / "1").mkdir(parents=True)  # as if synced again: the delete removes it too
    assert cluster.s.delete(url + str(exp_id)).json() == {}
    assert not tb.exists()
    assert cluster.s.get(url + str(exp_id)).status_code == 404
    assert cluster.s.get(cluster.url + f"/api/v1/trials/{trial['id']}").status_code == 404
    assert cluster.s.get(cluster.url + f"/api/v1/checkpoints/{last}").status_code == 404
    assert not (storage / last).exists()
    # ids of deleted experiments and trials are never given out again
    newest = max(exp_id, paused)
    newest_trial = cluster.trials(paused)[0]["id"]
    assert cluster.post(f"/api/v1/experiments/{paused}/kill").status_code == 200
    assert cluster.s.delete(url + str(paused)).status_code == 200
    again = _paused(cluster)
    assert again > newest
    assert cluster.trials(again)[0]["id"] > newest_trial > trial["id"]
