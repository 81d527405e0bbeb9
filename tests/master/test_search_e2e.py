"""Search methods end to end: a real master with one CPU slot and real trial processes.

Promotion ASHA on one slot (a waiting trial holds no slot; a promoted one resumes from its
checkpoint with the next run id: docs/reference/master.md §6 item 23), InvalidHP replaced by random
and ASHA (§1.9, our fix), the 0.38-style ``time_metric`` ASHA stopping trials through the preemption
signal, a non-numeric metric failing an ASHA experiment (§6 item 20), and a master killed with
SIGKILL in the middle of an ASHA search making the same decisions as one that ran straight through.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pytest
from _kit.master import MasterProcess, Run
from _kit.trial_cluster import Cluster

from determined.master.store import _experiments, _metrics, make_engine, sqlite_url

pytestmark = pytest.mark.e2e

# Trains op.length steps, checkpointing at each validation, resuming from its latest
# checkpoint. Its metric (lower is better) is hp "x" plus a learning curve, or its trial id
# when the space has no "x". Every few steps it may validate with the "batches" time metric
# (0.38 style) and stops on a preemption signal. Each run appends its story to events.jsonl.
SEARCH_PY = r"""
import json, os, pathlib, sys, time
import determined as det
from determined import core

info = det.get_cluster_info()
hp = info.trial.hparams
tid = info.trial.trial_id
run = int(os.environ["DET_TRIAL_RUN_ID"])
out = pathlib.Path(hp["out"])

def log(event, **kw):
    line = {"event": event, "trial": tid, "run": run, "t": time.time(), **kw}
    with open(out / "events.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")

def metric(steps):
    base = hp["x"] if "x" in hp else float(tid)
    return hp.get("metric", base + 1.0 / steps)

def save(ctx, steps):
    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
        (path / "state.json").write_text(json.dumps({"steps": steps}))

with core.init() as ctx:
    if tid in hp.get("invalid_trials", []):
        log("invalid_hp")
        raise det.InvalidHP(f"trial {tid} rejects its hyperparameters")
    steps = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((path / "state.json").read_text())["steps"]
    log("start", steps=steps)
    for op in ctx.searcher.operations():
        while steps < op.length:
            time.sleep(hp.get("sleep", 0.0))
            steps += 1
            every = hp.get("validate_every", 0)
            if every and steps % every == 0:
                values = {"loss": metric(steps), "batches": steps}
                ctx.train.report_validation_metrics(steps, values)
                log("validated", steps=steps)
            if ctx.preempt.should_preempt():
                save(ctx, steps)
                log("preempted", steps=steps)
                sys.exit(0)
        if not hp.get("validate_every"):
            ctx.train.report_validation_metrics(steps, {"loss": metric(steps)})
            log("validated", steps=steps)
        save(ctx, steps)
        op.report_completed(metric(steps))
    log("end", steps=steps)
"""


def _asha(out: pathlib.Path, **searcher: Any) -> dict[str, Any]:
    return {
        "name": "search-e2e",
        "entrypoint": "python3 train.py",
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 7},
        "searcher": {
            "name": "async_halving",
            "metric": "loss",
            "num_rungs": 2,
            "divisor": 2,
            "max_length": 4,
            "max_trials": 4,
            "max_concurrent_trials": 2,
            **searcher,
        },
        "hyperparameters": {"out": str(out)},
    }


def _events(out: pathlib.Path) -> list[dict[str, Any]]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _runs(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(trial id, run id) of every run that started training, in start order."""
    return [(e["trial"], e["run"]) for e in events if e["event"] == "start"]


def _create(cluster: Cluster, cfg: dict[str, Any]) -> int:
    pathlib.Path(cfg["hyperparameters"]["out"]).mkdir(parents=True, exist_ok=True)
    return cluster.create(cfg, {"train.py": SEARCH_PY})


def _validations(master: MasterProcess, trial_ids: list[int]) -> dict[int, list[tuple]]:
    """Live (not archived) validation rows per trial: (steps, loss)."""
    engine = make_engine(sqlite_url(master.data_dir))
    try:
        with engine.connect() as conn:
            return {
                t: [
                    (int(r["steps_completed"]), r["metrics"]["loss"])
                    for r in _metrics.list_rows(conn, t, "validation")
                ]
                for t in trial_ids
            }
    finally:
        engine.dispose()


def _snapshot(master: MasterProcess, exp_id: int) -> dict[str, Any]:
    engine = make_engine(sqlite_url(master.data_dir))
    try:
        with engine.connect() as conn:
            return _experiments.load_snapshot(conn, exp_id) or {}
    finally:
        engine.dispose()


def test_promotion_asha_on_one_slot_resumes_waiting_trials(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """§6 item 23: successive halving on one slot. Metric = trial id, so the first
    trial is best; rungs at 2 and 4 steps, divisor 2, four trials."""
    out = tmp_path / "out"
    exp_id = _create(cluster, _asha(out))
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
    t1, t2, t3, t4 = (int(t["id"]) for t in cluster.trials(exp_id))
    events = _events(out)
    # t1 waits at rung 0 without its process; t2's result promotes it, and it comes back as
    # run 2; t3 and t4 fill rung 0, t4's result promotes t2, which comes back as run 2.
    assert _runs(events) == [(t1, 1), (t2, 1), (t1, 2), (t3, 1), (t4, 1), (t2, 2)]
    resumed = {(e["trial"], e["run"]): e["steps"] for e in events if e["event"] == "start"}
    assert resumed[(t1, 2)] == 2 and resumed[(t2, 2)] == 2  # from the rung-0 checkpoint
    # One slot: each run's process ended before the next one started.
    spans = []
    for trial, run in _runs(events):
        times = [e["t"] for e in events if (e["trial"], e["run"]) == (trial, run)]
        spans.append((min(times), max(times)))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
    steps = {
        t: [s for s, _ in rows]
        for t, rows in _validations(cluster.master, [t1, t2, t3, t4]).items()
    }
    assert steps == {t1: [2, 4], t2: [2, 4], t3: [2], t4: [2]}
    assert [t["state"] for t in cluster.trials(exp_id)] == ["STATE_COMPLETED"] * 4
    best = cluster.get(f"/api/v1/experiments/{exp_id}/searcher/best_searcher_validation_metric")
    assert best["metric"] == pytest.approx(t1 + 0.25)


@pytest.mark.parametrize("name", ["random", "async_halving"])
def test_invalid_hp_trial_is_replaced(cluster: Cluster, tmp_path: pathlib.Path, name: str) -> None:
    """§1.9 fixed: det.InvalidHP raised inside core.init() reaches the search, which
    starts a replacement; the invalid trial does not count against max_trials."""
    out = tmp_path / "out"
    cfg = _asha(out, name=name, max_trials=2, max_concurrent_trials=1)
    if name == "random":
        for key in ("num_rungs", "divisor"):
            del cfg["searcher"][key]
    cfg["hyperparameters"]["invalid_trials"] = [1]  # the master's first trial id
    exp_id = _create(cluster, cfg)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
    trials = cluster.trials(exp_id)
    assert int(trials[0]["id"]) == 1
    assert len(trials) == 3  # two valid trials, plus the invalid one
    assert [t["state"] for t in trials] == ["STATE_COMPLETED"] * 3
    events = _events(out)
    assert [e["trial"] for e in events if e["event"] == "invalid_hp"] == [1]
    valid = [int(t["id"]) for t in trials[1:]]
    rows = _validations(cluster.master, [1, *valid])
    assert rows[1] == [] and all(rows[t] for t in valid)


def test_time_metric_asha_stops_trials_by_preemption(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """0.38 style: the search judges each reported validation at its "batches" value (rungs
    at 4 and 8) and stops poor trials through the preemption signal, mid-training."""
    out = tmp_path / "out"
    cfg = _asha(out, max_trials=3, max_concurrent_trials=1)
    del cfg["searcher"]["max_length"]
    cfg["searcher"].update(time_metric="batches", max_time=8)
    cfg["hyperparameters"].update(validate_every=2, sleep=0.25)
    exp_id = _create(cluster, cfg)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
    t1, t2, t3 = (int(t["id"]) for t in cluster.trials(exp_id))
    events = _events(out)
    stopped = {e["trial"]: e["steps"] for e in events if e["event"] == "preempted"}
    # t1 (best) runs to max_time; t2 and t3 rank below it at the 4-batch rung and are
    # stopped there: the signal reaches them before they train to 8.
    assert t1 not in stopped
    assert set(stopped) == {t2, t3} and all(4 <= s < 8 for s in stopped.values()), stopped
    assert [e["steps"] for e in events if e["event"] == "end"] == [8]
    assert [t["state"] for t in cluster.trials(exp_id)] == ["STATE_COMPLETED"] * 3


def test_non_numeric_metric_fails_an_asha_experiment(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """§6 item 20."""
    out = tmp_path / "out"
    cfg = _asha(out, max_trials=1, max_concurrent_trials=1)
    cfg["hyperparameters"]["metric"] = "not a number"
    exp_id = _create(cluster, cfg)
    cluster.wait_experiment(exp_id, "STATE_ERROR", timeout=60)


def _outcome(master: MasterProcess, cluster: Cluster, exp_id: int) -> dict[str, Any]:
    trials = cluster.trials(exp_id)
    ids = [int(t["id"]) for t in trials]
    best = cluster.get(f"/api/v1/experiments/{exp_id}/searcher/best_searcher_validation_metric")
    snap = _snapshot(master, exp_id)
    return {
        "trials": [(t["hparams"]["x"], t["state"]) for t in trials],
        "validations": list(_validations(master, ids).values()),
        "best": best["metric"],
        "search": {k: v for k, v in snap.items() if k != "outstanding"},
    }


def test_kill_9_in_the_middle_of_asha_changes_no_decision(tmp_path: pathlib.Path) -> None:
    """Persistence (issue scope 5): SIGKILL the master while an ASHA search runs, start it
    again, and the trials, promotions (validated lengths) and best are those of a run that
    was never interrupted with the same seed."""
    outcomes = []
    for interrupt in (False, True):
        out = tmp_path / f"out-{interrupt}"
        master = MasterProcess(tmp_path / f"master-{interrupt}", cpu_slots=1)
        master.start()
        try:
            cluster = Cluster(master)
            cfg = _asha(out)
            cfg["hyperparameters"].update(x={"type": "double", "minval": 0, "maxval": 1})
            cfg["hyperparameters"]["sleep"] = 0.05
            exp_id = _create(cluster, cfg)
            if interrupt:
                deadline = time.monotonic() + 60
                while sum(e["event"] == "validated" for e in _events(out)) < 3:
                    if time.monotonic() > deadline:
                        state = cluster.experiment(exp_id)["state"]
                        raise AssertionError(f"{state}: {_events(out)}\n{master.log.read_text()}")
                    time.sleep(0.02)
                master.kill()
                master.start()
            cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
            outcomes.append(_outcome(master, cluster, exp_id))
        finally:
            master.stop()
    straight, resumed = outcomes
    assert resumed == straight
    assert len(straight["trials"]) == 4
    assert sorted(len(v) for v in straight["validations"]) == [1, 1, 2, 2]


# ------------------------------------------------------------- through the API, no processes


def _post_experiment(master: MasterProcess, config: str) -> Any:
    r = master.session().post(master.url + "/api/v1/experiments", json={"config": config})
    return r


def test_same_seed_same_trials_across_experiments(shared_master: MasterProcess) -> None:
    """§6 item 4, through the master: hyperparameters and request ids (in the task ids)
    follow from the config and experiment_seed alone."""
    config = """
entrypoint: python3 train.py
reproducibility: {experiment_seed: %d}
searcher: {name: random, metric: loss, max_length: 5, max_trials: 3, max_concurrent_trials: 0}
hyperparameters:
  lr: {type: log, minval: -4, maxval: -1, base: 10}
  layers: {type: int, minval: 1, maxval: 8}
  opt: {type: categorical, vals: [sgd, adam]}
"""
    seen = []
    for seed in (11, 11, 12):
        r = _post_experiment(shared_master, config % seed)
        assert r.status_code == 200, r.text
        exp_id = int(r.json()["experiment"]["id"])
        trials = Cluster(shared_master).trials(exp_id)
        seen.append([(t["hparams"], t["taskId"].split(".", 1)[1]) for t in trials])
    assert len(seen[0]) == 3 and seen[0] == seen[1]
    assert seen[2] != seen[0]


@pytest.mark.parametrize(
    ("searcher", "hparams", "needle"),
    [
        (
            "{name: grid, metric: m, max_length: 1}",
            "{x: {type: int, minval: 0, maxval: 3}}",
            "count",
        ),
        (
            "{name: grid, metric: m, max_length: 1, max_trials: 2}",
            "{x: {type: int, minval: 0, maxval: 3, count: 2}}",
            "max_trials",
        ),
    ],
)
def test_grid_configs_are_rejected_at_create(
    shared_master: MasterProcess, searcher: str, hparams: str, needle: str
) -> None:
    """§6 item 7, through the master: nothing is created."""
    listed = "/api/v1/experiments"
    before = [e["id"] for e in Cluster(shared_master).get(listed)["experiments"]]
    config = f"entrypoint: x\nsearcher: {searcher}\nhyperparameters: {hparams}\n"
    r = _post_experiment(shared_master, config)
    assert r.status_code == 400 and needle in r.json()["message"], r.text
    assert [e["id"] for e in Cluster(shared_master).get(listed)["experiments"]] == before


def test_op_lengths_are_in_max_length_units(shared_master: MasterProcess) -> None:
    """§6 item 13: {epochs: 12}, divisor 3, three rungs -> the first op trains to epoch 1
    (rungs 1/4/12), absolute and unconverted; `single` with {records: 640} asks for 640."""
    for searcher, first in (
        (
            "{name: async_halving, metric: m, max_length: {epochs: 12}, num_rungs: 3, "
            "divisor: 3, max_trials: 4}",
            "1",
        ),
        ("{name: single, metric: m, max_length: {records: 640}}", "640"),
    ):
        run = Run(shared_master, f"entrypoint: x\nsearcher: {searcher}\n")
        r = run.trial.get(shared_master.url + f"/api/v1/trials/{run.trial_id}/searcher/operation")
        assert r.json()["op"] == {"validateAfter": {"length": first}}


def test_an_invalid_hp_trial_never_runs_again(shared_master: MasterProcess) -> None:
    """After an InvalidHP report the trial is done, even if its process acknowledges a
    preemption before exiting 0 (that would otherwise mean "run me again"); the search
    replaces it."""
    config = """
entrypoint: x
searcher: {name: random, metric: m, max_length: 5, max_trials: 1, max_concurrent_trials: 1}
hyperparameters: {lr: {type: double, minval: 0, maxval: 1}}
"""
    run = Run(shared_master, config)
    path = f"/api/v1/trials/{run.trial_id}/early_exit"
    assert run.post(path, json={"reason": "EXITED_REASON_INVALID_HP"}).status_code == 200
    op = run.trial.get(shared_master.url + f"/api/v1/trials/{run.trial_id}/searcher/operation")
    assert op.json()["completed"] is True  # nothing more to train
    assert run.post(f"/api/v1/allocations/{run.allocation_id}/signals/ack_preemption").ok
    assert run.exit(0) == "STATE_COMPLETED"
    trials = Cluster(shared_master).trials(run.experiment_id)
    assert [t["state"] for t in trials] == ["STATE_COMPLETED", "STATE_QUEUED"]
