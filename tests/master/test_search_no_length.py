"""0.38-style searches without ``searcher.max_length`` on a real master: the trial decides its
own length, reports raw progress, and ends by exiting 0.

The master serves such a trial ``{op: null, completed: true}``, schedules it anyway, and an
exit 0 that acknowledged no preemption completes it; an acknowledged exit (pause, preemption)
runs it again later. First through the API with no processes, then with real Core API trials
run by the local resource manager.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pytest
from _kit.master import MasterProcess, Run
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

# ------------------------------------------------------------- through the API, no processes

SINGLE = """
entrypoint: x
searcher: {name: single, metric: loss}
hyperparameters: {lr: 0.1}
"""

RANDOM = """
entrypoint: x
searcher: {name: random, metric: loss, max_trials: 2, max_concurrent_trials: 1}
hyperparameters: {lr: {type: double, minval: 0, maxval: 1}}
"""


def _operation(run: Run) -> Any:
    url = run.master.url + f"/api/v1/trials/{run.trial_id}/searcher/operation"
    r = run.trial.get(url)
    assert r.status_code == 200, r.text
    return r.json()


def _experiment(run: Run) -> dict[str, Any]:
    return dict(run.get(f"/api/v1/experiments/{run.experiment_id}")["experiment"])


def test_a_trial_without_length_runs_and_an_unacknowledged_exit_completes_it(
    shared_master: MasterProcess,
) -> None:
    run = Run(shared_master, SINGLE)  # allocating it proves it is runnable
    assert _operation(run) == {"op": None, "completed": True}
    progress = {"progress": 0.25, "is_raw": True}
    assert run.post(f"/api/v1/trials/{run.trial_id}/progress", json=progress).ok
    assert _experiment(run)["progress"] == pytest.approx(0.25)
    assert run.exit(0) == "STATE_COMPLETED"
    exp = _experiment(run)
    assert (exp["state"], exp["progress"]) == ("STATE_COMPLETED", 1.0)


def test_an_acknowledged_exit_runs_the_trial_again(shared_master: MasterProcess) -> None:
    run = Run(shared_master, SINGLE)
    assert run.post(f"/api/v1/allocations/{run.allocation_id}/signals/ack_preemption").ok
    assert run.exit(0) == "STATE_ACTIVE"  # preempted: it still has work
    assert run.allocate()["runId"] == 2
    assert _operation(run) == {"op": None, "completed": True}
    assert run.exit(3) == "STATE_ACTIVE"  # a failure restarts it (max_restarts 5)
    assert run.allocate()["runId"] == 3
    assert run.exit(0) == "STATE_COMPLETED"
    assert _experiment(run)["state"] == "STATE_COMPLETED"


def test_random_without_length_creates_the_next_trial_when_one_completes(
    shared_master: MasterProcess,
) -> None:
    run = Run(shared_master, RANDOM)
    trials = run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]
    assert len(trials) == 1  # max_concurrent_trials 1
    for fraction in (0.5, 1.0):  # the trial's raw fraction counts for 1 of the 2 trials
        body = {"progress": fraction, "is_raw": True}
        assert run.post(f"/api/v1/trials/{run.trial_id}/progress", json=body).ok
        assert _experiment(run)["progress"] == pytest.approx(fraction / 2)
    assert run.exit(0) == "STATE_COMPLETED"
    assert _experiment(run)["progress"] == pytest.approx(0.5)  # 1 of 2 trials closed
    trials = run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]
    assert [t["state"] for t in trials] == ["STATE_COMPLETED", "STATE_QUEUED"]
    run.trial_id = int(trials[1]["id"])
    run.allocate()
    assert _operation(run) == {"op": None, "completed": True}
    assert run.exit(0) == "STATE_COMPLETED"
    assert _experiment(run)["state"] == "STATE_COMPLETED"


def test_a_restarted_master_continues_a_search_without_length(tmp_path: pathlib.Path) -> None:
    """The search is rebuilt from its snapshot and the config (which has no length)."""
    master = MasterProcess(tmp_path / "master")
    master.start()
    try:
        run = Run(master, RANDOM)
        assert run.exit(0) == "STATE_COMPLETED"
        master.kill()
        master.start()
        trials = run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]
        assert [t["state"] for t in trials] == ["STATE_COMPLETED", "STATE_QUEUED"]
        run.trial_id = int(trials[1]["id"])
        run.allocate()
        assert run.exit(0) == "STATE_COMPLETED"
        exp = _experiment(run)
        assert (exp["state"], exp["progress"]) == ("STATE_COMPLETED", 1.0)
        assert len(run.get(f"/api/v1/experiments/{run.experiment_id}/trials")["trials"]) == 2
    finally:
        master.stop()


def test_preview_endpoints_accept_a_search_without_length(shared_master: MasterProcess) -> None:
    """Determined 0.37's `det preview-search` renders the empty key as "N/A"."""
    s = shared_master.session()
    config = {
        "searcher": {"name": "random", "metric": "loss", "max_trials": 3},
        "hyperparameters": {"lr": {"type": "double", "minval": 0, "maxval": 1}},
    }
    r = s.post(shared_master.url + "/searcher/preview", json=config)
    assert r.status_code == 200, r.text
    assert r.json()["results"] == {"": 3}
    r = s.post(shared_master.url + "/api/v1/preview-hp-search", json={"config": config})
    assert r.status_code == 200, r.text
    assert r.json()["simulation"]["trials"] == [{"operations": [], "occurrences": 3}]


def test_asha_without_length_is_still_rejected(shared_master: MasterProcess) -> None:
    config = "entrypoint: x\nsearcher: {name: adaptive_asha, metric: loss, max_trials: 4}\n"
    r = shared_master.session().post(
        shared_master.url + "/api/v1/experiments", json={"config": config}
    )
    assert r.status_code == 400 and "max_length" in r.json()["message"], r.text


# ------------------------------------------------------------- real Core API trials

# Trains hp["steps"] steps of its own choosing (no searcher operations), reporting training
# metrics and raw progress each step, a validation at the end, and exits 0. It resumes from
# its latest checkpoint and honours preemption. Each run appends its story to events.jsonl.
TRAIN_PY = r"""
import json, os, pathlib, sys, time
import determined as det
from determined import core

info = det.get_cluster_info()
hp = info.trial.hparams
tid = info.trial.trial_id
run = int(os.environ["DET_TRIAL_RUN_ID"])
out = pathlib.Path(hp["out"])
total = int(hp["steps"])

def log(event, **kw):
    with open(out / "events.jsonl", "a") as f:
        f.write(json.dumps({"event": event, "trial": tid, "run": run, **kw}) + "\n")

def save(ctx, steps):
    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
        (path / "state.json").write_text(json.dumps({"steps": steps}))

with core.init() as ctx:
    steps = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((path / "state.json").read_text())["steps"]
    log("start", steps=steps)
    while steps < total:
        time.sleep(hp.get("sleep", 0.0))
        steps += 1
        ctx.train.report_training_metrics(steps, {"loss": 1.0 / steps})
        ctx.train.report_progress(steps / total)
        log("step", steps=steps)
        if ctx.preempt.should_preempt():
            save(ctx, steps)
            log("preempted", steps=steps)
            sys.exit(0)
    ctx.train.report_validation_metrics(steps, {"loss": 0.5 / steps})
    save(ctx, steps)
    log("end", steps=steps)
"""


def _config(out: pathlib.Path, searcher: dict[str, Any], **hparams: Any) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    return {
        "name": "no-length",
        "entrypoint": "python3 train.py",
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 3},
        "searcher": {"metric": "loss", **searcher},  # no max_length
        "hyperparameters": {"out": str(out), **hparams},
    }


def _events(out: pathlib.Path) -> list[dict[str, Any]]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_random_without_length_runs_each_trial_to_its_own_end(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    searcher = {"name": "random", "max_trials": 2, "max_concurrent_trials": 1}
    exp_id = cluster.create(_config(out, searcher, steps=4), {"train.py": TRAIN_PY})
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=60)
    assert (exp["state"], exp["progress"]) == ("STATE_COMPLETED", 1.0)
    trials = cluster.trials(exp_id)
    assert [t["state"] for t in trials] == ["STATE_COMPLETED"] * 2
    assert [t["totalBatchesProcessed"] for t in trials] == [4, 4]
    assert all(t["restarts"] == 0 for t in trials)
    events = _events(out)
    t1, t2 = (int(t["id"]) for t in trials)
    # one run each, one after the other (max_concurrent_trials 1), each to its own end
    assert [(e["trial"], e["run"], e["event"]) for e in events if e["event"] != "step"] == [
        (t1, 1, "start"),
        (t1, 1, "end"),
        (t2, 1, "start"),
        (t2, 1, "end"),
    ]
    for t in trials:
        rows = cluster.get(f"/api/v1/trials/{t['id']}")["trial"]
        assert rows["latestValidation"]["totalBatches"] == 4


def test_single_without_length_survives_pause_and_activate(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    cfg = _config(out, {"name": "single"}, steps=30, sleep=0.05)
    exp_id = cluster.create(cfg, {"train.py": TRAIN_PY})
    deadline = time.monotonic() + 30
    while sum(e["event"] == "step" for e in _events(out)) < 3:
        assert time.monotonic() < deadline, _events(out)
        time.sleep(0.02)
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200
    trial = cluster.wait_trial(exp_id, "STATE_PAUSED", timeout=15)
    deadline = time.monotonic() + 15
    while not any(e["event"] == "preempted" for e in _events(out)):
        assert time.monotonic() < deadline, _events(out)
        time.sleep(0.02)
    time.sleep(0.5)  # several scheduler ticks: a paused trial gets no new run
    assert [e["run"] for e in _events(out) if e["event"] == "start"] == [1]
    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").status_code == 200
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=30)
    assert (exp["state"], exp["progress"]) == ("STATE_COMPLETED", 1.0)
    events = _events(out)
    (stopped_at,) = [e["steps"] for e in events if e["event"] == "preempted"]
    assert 3 <= stopped_at < 30
    starts = [(e["run"], e["steps"]) for e in events if e["event"] == "start"]
    assert starts == [(1, 0), (2, stopped_at)]  # it ran again, from its checkpoint
    assert [(e["run"], e["steps"]) for e in events if e["event"] == "end"] == [(2, 30)]
    [done] = cluster.trials(exp_id)
    assert done["id"] == trial["id"]
    assert (done["state"], done["restarts"]) == ("STATE_COMPLETED", 0)
