"""``determined.experimental.client`` against a real master that trains a tiny PyTorchTrial on
one CPU slot (issue 13 items 1 and 5): create, wait, metrics, logs, labels, checkpoints
(listing, metadata, download both ways, loading the weights), and logging in through the token
store that ``det user login`` writes."""

from __future__ import annotations

import io
import json
import pathlib
import tarfile
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.pytorch_model_def import MODEL_DEF
from _kit.reference import Ref

from determined import errors
from determined.common.api import _auth
from determined.experimental import client

pytestmark = pytest.mark.e2e

CONFIG: dict[str, Any] = {
    "name": "sdk-test",
    "entrypoint": "model_def:RegressionTrial",
    "max_restarts": 0,
    "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 8}},
    "min_validation_period": {"batches": 4},
    "min_checkpoint_period": {"batches": 4},
    "hyperparameters": {"lr": 0.05, "global_batch_size": 8},
    "labels": ["first"],
    "checkpoint_storage": {"save_trial_latest": 2},  # keep both (GC keeps one by default)
}


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path_factory.mktemp("sdk") / "data", cpu_slots=1) as m:
        yield m


@pytest.fixture
def sdk_env(master: MasterProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """DET_MASTER for the in-process SDK (DET_HOME is the test's own, tests/conftest.py), and a
    client module with no session yet."""
    monkeypatch.setenv("DET_MASTER", master.url)
    client._determined = None
    yield
    client._determined = None


@pytest.fixture(scope="module")
def finished(master: MasterProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One experiment created and waited for through the SDK; ``{"id", "state", "dir"}``."""
    home = tmp_path_factory.mktemp("sdk-home")
    model = home / "model"
    model.mkdir()
    (model / "model_def.py").write_text(MODEL_DEF)
    extra = home / "extra.txt"
    extra.write_text("included\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DET_HOME", str(home / "det"))
        det = client.Determined(master=master.url)
        exp = det.create_experiment(CONFIG, model, includes=[extra])
        assert exp.state is not None and exp.name == "sdk-test"
        state = exp.wait(interval=0.5)
    return {"id": exp.id, "state": state, "dir": home}


def _logs(master: MasterProcess, exp_id: int) -> str:
    det = client.Determined(master=master.url)
    trial = det.get_experiment(exp_id).list_trials()[0]
    return "\n".join(trial.iter_logs())


def test_experiment_runs_and_reports(
    finished: dict[str, Any], master: MasterProcess, sdk_env: None
) -> None:
    exp = client.get_experiment(finished["id"])
    assert finished["state"] == client.ExperimentState.COMPLETED, _logs(master, exp.id)[-3000:]
    assert exp.state == client.ExperimentState.COMPLETED and exp.progress == 1.0
    assert exp.config is not None and exp.config["searcher"]["metric"] == "validation_loss"

    trial = exp.await_first_trial()
    assert [t.id for t in exp.list_trials()] == [trial.id]
    assert trial.state == client.TrialState.COMPLETED and trial.hparams is not None
    assert trial.hparams["lr"] == 0.05 and trial.get_experiment().id == exp.id

    validation = list(trial.iter_metrics("validation"))
    assert [m.steps_completed for m in validation] == [4, 8]
    assert all(m.group == "validation" and m.trial_id == trial.id for m in validation)
    assert 0 <= validation[-1].metrics["validation_loss"] < 10  # trained (untrained: ~14)
    training = list(client.iter_trials_metrics([trial.id], "training"))
    assert training and all("loss" in m.metrics for m in training)
    with pytest.warns(FutureWarning):
        legacy = list(trial.stream_validation_metrics())
    assert [m.steps_completed for m in legacy] == [4, 8]
    assert isinstance(legacy[0], client.ValidationMetrics)

    lines = list(trial.iter_logs())
    assert any("training ended" in line for line in lines), "\n".join(lines[-40:])
    assert list(trial.iter_logs(tail=3)) == lines[-3:]
    assert list(trial.iter_logs(head=2)) == lines[:2]
    found = list(trial.iter_logs(search_text="training ended"))
    assert found and all("training ended" in line for line in found)
    assert list(trial.iter_logs(rank_ids=[7])) == []  # no rank 7 on one slot
    with pytest.raises(ValueError, match="RFC 3339"):
        list(trial.iter_logs(timestamp_before="yesterday"))

    code = pathlib.Path(exp.download_code(str(finished["dir"] / "code")))
    with tarfile.open(code) as tar:
        names = {n.lstrip("./") for n in tar.getnames()}
    assert {"model_def.py", "extra.txt"} <= names


def test_checkpoints_list_download_and_load(
    finished: dict[str, Any], tmp_path: pathlib.Path, sdk_env: None
) -> None:
    exp = client.get_experiment(finished["id"])
    ckpts = exp.list_checkpoints()
    assert len(ckpts) == 2 and all(c.state == client.CheckpointState.COMPLETED for c in ckpts)
    best = ckpts[0]  # the searcher metric, smallest first
    losses = [
        c.training.validation_metrics["avgMetrics"]["validation_loss"]  # type: ignore[union-attr]
        for c in ckpts
    ]
    assert losses == sorted(losses)
    with pytest.warns(FutureWarning):
        assert exp.top_checkpoint().uuid == best.uuid
    with pytest.warns(FutureWarning):
        assert [c.uuid for c in exp.top_n_checkpoints(5)] == [best.uuid]  # one per trial
    newest = exp.list_checkpoints(
        sort_by=client.CheckpointSortBy.BATCH_NUMBER, order_by=client.OrderBy.DESC, max_results=1
    )
    assert len(newest) == 1
    steps = {c.uuid: (c.metadata or {}).get("steps_completed") for c in ckpts}
    assert steps[newest[0].uuid] == 8
    trial = client.get_trial(best.training.trial_id)  # type: ignore[union-attr]
    with pytest.warns(FutureWarning):
        latest = trial.select_checkpoint(latest=True)
    assert latest.uuid == newest[0].uuid
    with pytest.raises(ValueError, match="together"):
        trial.list_checkpoints(sort_by="validation_loss")

    direct = pathlib.Path(best.download(str(tmp_path / "direct"), client.DownloadMode.DIRECT))
    via_master = pathlib.Path(
        client.get_checkpoint(best.uuid).download(
            str(tmp_path / "master"), mode=client.DownloadMode.MASTER
        )
    )
    files = sorted(p.relative_to(direct).as_posix() for p in direct.rglob("*") if p.is_file())
    assert files == sorted(
        p.relative_to(via_master).as_posix() for p in via_master.rglob("*") if p.is_file()
    )
    assert "metadata.json" in files
    for rel in files:
        assert (direct / rel).read_bytes() == (via_master / rel).read_bytes()
    state = torch.load(direct / "state_dict.pth", weights_only=False)
    model = torch.nn.Linear(4, 1)
    model.load_state_dict(state["models_state_dict"][0])
    assert model.weight.shape == (1, 4)

    best.add_metadata({"stage": "prod", "n": 1})
    best.add_metadata({"n": 2})
    fresh = client.get_checkpoint(best.uuid)
    assert fresh.metadata is not None and fresh.metadata["stage"] == "prod"
    assert fresh.metadata["n"] == 2
    fresh.remove_metadata(["stage"])
    fresh.reload()
    assert fresh.metadata is not None and "stage" not in fresh.metadata
    fresh.write_metadata_file(str(tmp_path / "meta.json"))
    assert json.loads((tmp_path / "meta.json").read_text())["n"] == 2


REF_CHECKPOINT = """
import json, os, sys, tempfile
from determined.experimental import client

url, uuid = sys.argv[1], sys.argv[2]
client.login(master=url, user="determined", password="")
ckpt = client.get_checkpoint(uuid)
ckpt.add_metadata({"by": "0.37"})
path = ckpt.download(tempfile.mkdtemp() + "/m", mode=client.DownloadMode.MASTER)
print(json.dumps({
    "metadata": client.get_checkpoint(uuid).metadata,
    "files": sorted(os.listdir(path)),
}))
"""


def test_the_reference_sdk_downloads_through_the_master(
    finished: dict[str, Any], master: MasterProcess, sdk_env: None, tmp_path: pathlib.Path
) -> None:
    """0.37's own SDK against this master: ``add_metadata`` and ``DownloadMode.MASTER``."""
    best = client.get_experiment(finished["id"]).list_checkpoints()[0]
    got = Ref(master, tmp_path / "ref").python(REF_CHECKPOINT, best.uuid)
    assert got["metadata"]["by"] == "0.37"
    assert got["metadata"]["steps_completed"] == (best.metadata or {})["steps_completed"]
    assert {"metadata.json", "state_dict.pth"} <= set(got["files"])
    ours = pathlib.Path(best.download(str(tmp_path / "ours"), client.DownloadMode.MASTER))
    assert sorted(p.name for p in ours.iterdir()) == got["files"]


def test_checkpoint_archive_formats(finished: dict[str, Any], sdk_env: None) -> None:
    """``GET /checkpoints/{uuid}`` answers the format ``Accept`` asks for, files at the top."""
    det = client.Determined()
    best = det.get_experiment(finished["id"]).list_checkpoints()[0]
    names = {n for n in best.resources or {} if not n.endswith("/")}  # files, not dirs
    plain = det._session.get(f"/checkpoints/{best.uuid}")  # no Accept: a tar, as in 0.37
    assert plain.headers["content-type"].startswith("application/x-tar")
    with tarfile.open(fileobj=io.BytesIO(plain.content)) as tar:
        assert names <= {m.name for m in tar.getmembers() if m.isfile()}
    zipped = det._session.get(
        f"/checkpoints/{best.uuid}", headers={"Accept": "application/zip"}
    ).content
    with zipfile.ZipFile(io.BytesIO(zipped)) as zf:
        assert names <= set(zf.namelist())
    with pytest.raises(errors.MasterError, match="unsupported media type") as e:
        det._session.get(f"/checkpoints/{best.uuid}", headers={"Accept": "text/plain"})
    assert e.value.status == 415
    with pytest.raises(errors.MasterNotFound):
        det._session.get("/checkpoints/no-such-uuid")


def test_labels_names_and_listing(finished: dict[str, Any], sdk_env: None) -> None:
    exp = client.get_experiment(finished["id"])
    assert exp.labels == {"first"}
    exp.add_label("second")
    assert exp.labels == {"first", "second"}
    exp.remove_label("first")
    assert exp.labels == {"second"}
    exp.set_labels({"x", "y"})
    exp.set_name("renamed")
    exp.set_description("about it")
    exp.reload()
    assert (exp.labels, exp.name, exp.description) == ({"x", "y"}, "renamed", "about it")

    assert [e.id for e in client.list_experiments(labels=["y"])] == [exp.id]
    assert client.list_experiments(labels=["nope"]) == []
    done = client.list_experiments(states=[client.ExperimentState.COMPLETED], name="renam")
    assert [e.id for e in done] == [exp.id]
    exp.archive()
    assert client.get_experiment(exp.id).archived is True
    exp.unarchive()
    assert client.get_experiment(exp.id).archived is False


def test_create_experiment_rejects_bad_input(sdk_env: None, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="must be a dict"):
        client.create_experiment(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not exist"):
        client.create_experiment(CONFIG, tmp_path / "missing")
    with pytest.raises(errors.BadRequest, match="template 't' not found"):
        client.create_experiment(CONFIG, tmp_path, template="t")


def test_login_reuses_the_token_of_det_user_login(
    master: MasterProcess, sdk_env: None, tmp_path: pathlib.Path
) -> None:
    home = tmp_path / "det_home"  # the DET_HOME of this test (tests/conftest.py)
    det = Det(home, master.url)
    det.ok("user", "login", "admin", input="\n")  # 0.37's admin has an empty password too
    store = json.loads((home / "auth.json").read_text())
    [entry] = store["masters"].values()
    token = entry["tokens"]["admin"]

    client.login()
    me = client.whoami()
    assert me.username == "admin" and me.admin is True
    assert client._determined is not None
    assert client._determined._session._http.headers["Authorization"] == f"Bearer {token}"
    with pytest.raises(ValueError, match="once"):
        client.login()

    # A second user, made with the SDK; `det user login` makes it the active one, and a new
    # login() without arguments follows.
    alice = client.create_user("alice", admin=False, password="Secret123")
    assert alice.username == "alice" and not alice.admin
    assert "alice" in {u.username for u in client.list_users()}
    with pytest.raises(ValueError, match="too weak"):
        client.create_user("bob", admin=False, password="short")
    det.ok("user", "login", "alice", input="Secret123\n")
    client._determined = None
    client.login()
    assert client.whoami().username == "alice"
    assert client.get_session_username() == "alice"

    # logout() ends the session: the CLI has to log in again.
    client.logout()
    assert client._determined is None
    store = json.loads((home / "auth.json").read_text())
    [entry] = store["masters"].values()
    assert "alice" not in entry["tokens"]
    with pytest.raises(_auth.LoginError, match="det user login alice"):
        client.Determined(user="alice")
    assert client.Determined(user="alice", password="Secret123").whoami().username == "alice"


def test_login_inside_a_task_is_its_owner(
    master: MasterProcess, sdk_env: None, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.37's order inside a task (``DET_USER`` and ``DET_USER_TOKEN`` set, no login cached):
    the task's token is used unless another user is asked for; ``DET_USER`` without
    ``DET_PASS`` does not choose the user otherwise."""
    _, token = _auth.login(master.url, "admin", "")
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.delenv("DET_PASS", raising=False)
    monkeypatch.delenv("DET_USER_TOKEN", raising=False)
    _, name = _auth.login_with_cache(master.url)
    assert name == "determined"  # no token: 0.37 falls back to the default user
    _auth.logout(master.url, "determined")

    monkeypatch.setenv("DET_USER_TOKEN", token)
    sess, name = _auth.login_with_cache(master.url)
    assert name == "admin" and sess.token == token
    assert client.Determined().whoami().username == "admin"
    assert _auth.login_with_cache(master.url, "admin")[0].token == token
    _, name = _auth.login_with_cache(master.url, "determined")  # asked for: a login of its own
    assert name == "determined"
    # A login cached for the chosen user comes first (`det user login` inside the task).
    sess, name = _auth.login_with_cache(master.url)
    assert name == "determined" and sess.token != token


def test_model_registry(finished: dict[str, Any], sdk_env: None) -> None:
    exp = client.get_experiment(finished["id"])
    best = exp.list_checkpoints(max_results=1)[0]
    model = client.create_model("sdk-model", description="d", metadata={"a": 1})
    assert model.name == "sdk-model" and model.metadata == {"a": 1}
    version = model.register_version(best.uuid)
    assert version.model_version == 1 and version.checkpoint is not None
    assert version.checkpoint.uuid == best.uuid
    assert [v.model_version for v in model.list_versions()] == [1]
    latest = model.get_version()
    assert latest is not None and latest.model_version == 1
    model.set_labels(["l1"])
    model.add_metadata({"b": 2})
    model.reload()
    assert model.labels == ["l1"] and model.metadata == {"a": 1, "b": 2}
    assert "l1" in client.get_model_labels()
    assert [m.name for m in client.list_models()] == ["sdk-model"]
    assert client.get_model(model.model_id or 0).name == "sdk-model"
    model.archive()
    assert client.get_model("sdk-model").archived is True


def test_workspaces_and_projects(finished: dict[str, Any], sdk_env: None) -> None:
    ws = client.create_workspace("sdk-ws")
    assert ws.name == "sdk-ws" and client.get_workspace("sdk-ws").id == ws.id
    project = ws.create_project("sdk-proj", description="p")
    assert project.workspace_id == ws.id
    assert [p.name for p in ws.list_projects()] == ["sdk-proj"]
    exp = client.get_experiment(finished["id"])
    exp.move_to_project("sdk-ws", "sdk-proj")
    assert exp.project_id == project.id
    assert [e.id for e in project.list_experiments()] == [exp.id]
    assert [e.id for e in client.list_experiments(project_id=project.id)] == [exp.id]
    project.add_note("readme", "hello")
    project.reload()
    assert project.notes == [{"name": "readme", "contents": "hello"}]
    project.archive()
    assert client.get_workspace("sdk-ws").get_project("sdk-proj").archived is True
