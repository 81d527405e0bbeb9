"""core_v2 (unmanaged experiments) end to end: a plain ``python train.py`` on this machine
registers an experiment and a trial on a real master, trains a tiny torch model, reports
metrics and checkpoints with the user's login, and a rerun with the same external ids resumes
the same trial from its latest checkpoint. Off a master it falls back to the local Core API.
The reference's own core_v2 runs the same kind of script against our master."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess, clean_env
from _kit.reference import REF

pytestmark = pytest.mark.e2e

TRAIN = r"""
import json, os, sys, torch
from determined.experimental import core_v2

ext, steps, fail = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "fail"
ids = {} if ext == "-" else {"external_experiment_id": ext, "external_trial_id": ext}
core_v2.init(
    defaults=core_v2.DefaultConfig(
        name="tiny-" + ext, hparams={"lr": 0.1}, labels=["unmanaged"],
        checkpoint_storage=os.environ["CKPT_DIR"],
    ),
    unmanaged=core_v2.UnmanagedConfig(**ids),
)
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
y = x.sum(dim=1, keepdim=True)
start = 0
latest = core_v2.info.latest_checkpoint if core_v2.info is not None else None
if latest:
    with core_v2.checkpoint.restore_path(latest) as path:
        state = torch.load(path / "state.pt")
    model.load_state_dict(state["model"])
    start = state["step"]
loss = None
for step in range(start, start + steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    core_v2.train.report_training_metrics(steps_completed=step + 1, metrics={"loss": loss.item()})
end = start + steps
core_v2.train.report_validation_metrics(steps_completed=end, metrics={"val_loss": loss.item()})
with core_v2.checkpoint.store_path({"steps_completed": end}) as (path, uuid):
    torch.save({"model": model.state_dict(), "step": end}, path / "state.pt")
out = {"start": start, "end": end, "uuid": uuid}
if core_v2.info is not None:
    out.update(
        experiment=core_v2.info.trial.experiment_id,
        trial=core_v2.info.trial.trial_id,
        url=core_v2.url_reverse_webui_exp_view(),
    )
print(json.dumps(out), flush=True)
if fail:
    raise RuntimeError("boom")
"""


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    # One CPU slot: a resource manager runs, and must leave unmanaged trials alone.
    with MasterProcess(tmp_path_factory.mktemp("core-v2") / "data", cpu_slots=1) as m:
        yield m


def _run(
    home: pathlib.Path, master: str | None, *args: str, ok: bool = True, login: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python train.py ARGS`` with DET_HOME ``home``; ``login``: as ``determined`` through
    DET_USER/DET_PASS, else with the token ``det user login`` cached in ``home``."""
    script = home / "train.py"
    script.write_text(TRAIN)
    env = clean_env(home)
    env["CKPT_DIR"] = str(home / "ckpts")
    if login:
        env.update(DET_USER="determined", DET_PASS="")
    if master is not None:
        env["DET_MASTER"] = master
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
        timeout=120,
    )
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _out(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _get(master: MasterProcess, path: str) -> Any:
    r = master.session().get(master.url + path, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _trial_metrics(master: MasterProcess, trial_id: int, group: str) -> list[dict[str, Any]]:
    r = master.session().get(
        master.url + "/api/v1/trials/metrics/trial_metrics",
        params={"trialIds": trial_id, "group": group},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    chunks = [json.loads(line)["result"]["metrics"] for line in r.text.splitlines() if line]
    return [m for chunk in chunks for m in chunk]


def test_unmanaged_run_registers_reports_and_resumes(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    first = _out(_run(tmp_path, master.url, "resume-me", "3", "ok"))
    assert first["start"] == 0 and first["end"] == 3
    exp_id, trial_id = first["experiment"], first["trial"]
    assert first["url"] == f"{master.url}/experiments/{exp_id}"

    exp = _get(master, f"/api/v1/experiments/{exp_id}")["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["username"] == "determined"
    assert exp["unmanaged"] is True and exp["externalExperimentId"] == "resume-me"
    assert exp["name"] == "tiny-resume-me" and exp["labels"] == ["unmanaged"]
    trial = _get(master, f"/api/v1/trials/{trial_id}")["trial"]
    assert trial["state"] == "STATE_COMPLETED" and trial["hparams"] == {"lr": 0.1}
    assert trial["restarts"] == 0
    losses = _trial_metrics(master, trial_id, "training")
    assert len(losses) == 3, losses
    ckpts = _get(master, f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    assert [c["uuid"] for c in ckpts] == [first["uuid"]]
    assert (tmp_path / "ckpts" / first["uuid"] / "state.pt").is_file()

    # `det e list` shows it (as the user who ran it).
    det = Det(tmp_path / "det-home", master.url)
    listing = det.ok("e", "list")
    assert "tiny-resume-me" in listing and "COMPLETED" in listing
    # The script's output is the trial's log.
    assert '"start": 0' in det.ok("trial", "logs", str(trial_id))
    # The web UI's page and its metric feed have it too.
    page = master.session().get(f"{master.url}/experiments/{exp_id}", timeout=30)
    assert page.status_code == 200
    assert _get(master, f"/api/v1/webui/experiments/{exp_id}/metrics")

    # The same external ids: the same experiment and trial, resumed from step 3.
    second = _out(_run(tmp_path, master.url, "resume-me", "2", "ok"))
    assert (second["experiment"], second["trial"]) == (exp_id, trial_id)
    assert second["start"] == 3 and second["end"] == 5
    exp = _get(master, f"/api/v1/experiments/{exp_id}")["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["numTrials"] == 1
    later = _trial_metrics(master, trial_id, "training")
    assert [(m["totalBatches"], m["trialRunId"]) for m in later] == [
        (1, 1),
        (2, 1),
        (3, 1),
        (4, 2),
        (5, 2),
    ]
    # No checkpoint GC at the end: the script's own directory, which it resumes from.
    time.sleep(1.0)
    ckpts = _get(master, f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    assert {c["uuid"] for c in ckpts} == {first["uuid"], second["uuid"]}
    assert {c["state"] for c in ckpts} == {"STATE_COMPLETED"}
    assert (tmp_path / "ckpts" / first["uuid"] / "state.pt").is_file()


def test_the_login_of_det_user_login_is_used(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    user = {"user": {"username": "carol", "active": True}, "password": "Carol-pw1"}
    r = master.session().post(master.url + "/api/v1/users", json=user, timeout=30)
    assert r.status_code == 200, r.text
    Det(tmp_path, master.url).ok("user", "login", "carol", input="Carol-pw1\n")
    out = _out(_run(tmp_path, master.url, "-", "1", "ok", login=False))
    exp = _get(master, f"/api/v1/experiments/{out['experiment']}")["experiment"]
    assert exp["username"] == "carol" and exp["state"] == "STATE_COMPLETED"


def test_a_failing_run_errors_its_trial_and_experiment(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    proc = _run(tmp_path, master.url, "-", "1", "fail", ok=False)
    assert proc.returncode != 0 and "boom" in proc.stderr
    out = _out(proc)
    exp = _get(master, f"/api/v1/experiments/{out['experiment']}")["experiment"]
    assert exp["state"] == "STATE_ERROR" and exp["externalExperimentId"] is None
    trial = _get(master, f"/api/v1/trials/{out['trial']}")["trial"]
    assert trial["state"] == "STATE_ERROR"
    logs = Det(tmp_path / "det-home", master.url).ok("trial", "logs", str(out["trial"]))
    assert "RuntimeError: boom" in logs


def test_off_master_falls_back_to_the_local_core_api(tmp_path: pathlib.Path) -> None:
    proc = _run(tmp_path, None, "-", "2", "ok")
    notices = [line for line in proc.stderr.splitlines() if line.startswith("core_v2:")]
    assert len(notices) == 1 and "local Core API" in notices[0]
    out = _out(proc)
    assert "experiment" not in out and out["end"] == 2
    assert (tmp_path / "ckpts" / out["uuid"] / "state.pt").is_file()


REF_TRAIN = r"""
import json, os, sys
from determined.experimental import core_v2

ext = sys.argv[2]
core_v2.init(
    defaults=core_v2.DefaultConfig(name="ref-" + ext, checkpoint_storage=os.environ["CKPT_DIR"]),
    unmanaged=core_v2.UnmanagedConfig(external_experiment_id=ext, external_trial_id=ext),
    # AUTO would import torch's TensorBoard writer, which .refvenv does not have.
    tensorboard_mode=core_v2.TensorboardMode.MANUAL,
)
start = 0
if core_v2.info.latest_checkpoint:
    with core_v2.checkpoint.restore_path(core_v2.info.latest_checkpoint) as path:
        start = int((path / "step").read_text())
for step in range(start, start + 2):
    loss = 1.0 / (step + 1)
    core_v2.train.report_training_metrics(steps_completed=step + 1, metrics={"loss": loss})
with core_v2.checkpoint.store_path({"steps_completed": start + 2}) as (path, uuid):
    (path / "step").write_text(str(start + 2))
out = {"experiment": core_v2.info.trial.experiment_id, "trial": core_v2.info.trial.trial_id,
       "start": start}
print("ref-log-line", flush=True)
core_v2.close()
print(json.dumps(out), flush=True)
"""


@pytest.mark.skipif(not (REF / "bin" / "python").exists(), reason="no .refvenv (setup.sh --tests)")
def test_the_reference_core_v2_runs_against_this_master(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    env = {k: v for k, v in clean_env(tmp_path).items() if not k.startswith("PYTHON")}
    env.update(
        HOME=str(tmp_path),
        DET_MASTER=master.url,
        DET_USER="determined",
        DET_PASS="",
        CKPT_DIR=str(tmp_path / "ckpts"),
    )
    outs = []
    for _ in range(2):
        proc = subprocess.run(
            [str(REF / "bin" / "python"), "-c", REF_TRAIN, "-", "ref-ids"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outs[0]["start"] == 0 and outs[1]["start"] == 2
    assert outs[0]["experiment"] == outs[1]["experiment"] and outs[0]["trial"] == outs[1]["trial"]
    exp = _get(master, f"/api/v1/experiments/{outs[0]['experiment']}")["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["unmanaged"] is True
    assert len(_trial_metrics(master, outs[0]["trial"], "training")) == 4
    # Its log shipper's lines (POST /task-logs) are the trial's logs.
    logs = Det(tmp_path / "det-home", master.url).ok("trial", "logs", str(outs[0]["trial"]))
    assert logs.count("ref-log-line") == 2


CONTEXT_SCRIPT = r"""
import json
from determined.experimental import core_v2

ids = []
for fail in (False, True):
    try:
        with core_v2.init_context(config=core_v2.Config(name="ctx", labels=["cm"])) as ctx:
            ctx.train.report_training_metrics(steps_completed=1, metrics={"x": 1.0})
            ids.append([ctx.info.trial.experiment_id, ctx.info.trial.trial_id])
            if fail:
                raise ValueError("inside the with block")
    except ValueError:
        pass
print(json.dumps(ids), flush=True)
"""


def test_init_context_reports_the_outcome_of_its_with_block(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    env = clean_env(tmp_path)
    env.update(DET_MASTER=master.url, DET_USER="determined", DET_PASS="")
    proc = subprocess.run(
        [sys.executable, "-c", CONTEXT_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (ok_exp, ok_trial), (bad_exp, bad_trial) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert _get(master, f"/api/v1/trials/{ok_trial}")["trial"]["state"] == "STATE_COMPLETED"
    assert _get(master, f"/api/v1/experiments/{ok_exp}")["experiment"]["state"] == (
        "STATE_COMPLETED"
    )
    assert _get(master, f"/api/v1/trials/{bad_trial}")["trial"]["state"] == "STATE_ERROR"
    assert _get(master, f"/api/v1/experiments/{bad_exp}")["experiment"]["state"] == "STATE_ERROR"
