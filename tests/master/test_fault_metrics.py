"""The fault test of issue 7 and docs/reference/master.md §6 item 27, made deterministic: a real
trial reports steps 1–8 (validations at 4 and 8, a checkpoint at 5) and then hangs; the master is
killed with SIGKILL and started again; it kills the orphaned run, runs the trial again from the
checkpoint at 5, and the experiment completes with every metric present exactly once: run 1's
reports past step 5 are archived and run 2's replace them."""

from __future__ import annotations

import pathlib
import time

import pytest
from _kit.master import MasterProcess
from _kit.trial_cluster import Cluster, config, env_of, wait_dead, wait_file

from determined.master.store import _metrics, make_engine, sqlite_url

pytestmark = pytest.mark.e2e

HANG_PY = r"""
import json, os, pathlib, time
import determined as det
from determined import core

info = det.get_cluster_info()
out = pathlib.Path(info.trial.hparams["out"])
run = int(os.environ["DET_TRIAL_RUN_ID"])
env = {k: v for k, v in os.environ.items() if k.startswith("DET_")}
(out / f"{info.trial.trial_id}.{run}.env.json").write_text(json.dumps(env))
with core.init() as ctx:
    steps = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((path / "state.json").read_text())["steps"]
    for op in ctx.searcher.operations():
        while steps < op.length:
            steps += 1
            ctx.train.report_training_metrics(steps, {"loss": 1.0 / steps, "run": run})
            if steps % 4 == 0:
                ctx.train.report_validation_metrics(steps, {"loss": 1.0 / steps, "run": run})
            if steps == 5:
                with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                    (path / "state.json").write_text(json.dumps({"steps": steps}))
            if run == 1 and steps == 8:
                (out / "hanging").write_text(str(os.getpid()))
                time.sleep(300)
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "state.json").write_text(json.dumps({"steps": steps}))
        op.report_completed(1.0 / steps)
"""


def _rows(m: MasterProcess, trial_id: int, group: str, archived: bool) -> list[tuple[int, int]]:
    engine = make_engine(sqlite_url(m.data_dir))
    try:
        with engine.connect() as conn:
            rows = _metrics.list_rows(conn, trial_id, group, archived=archived)
    finally:
        engine.dispose()
    return sorted((int(r["steps_completed"]), int(r["metrics"]["run"])) for r in rows)


def test_kill_9_of_the_master_mid_experiment_keeps_every_metric_once(
    tmp_path: pathlib.Path,
) -> None:
    m = MasterProcess(tmp_path / "master", cpu_slots=1)
    m.start()
    try:
        out = tmp_path / "out"
        out.mkdir()
        cluster = Cluster(m)
        exp_id = cluster.create(config(out, max_length=12), {"train.py": HANG_PY})
        pid = int(wait_file(out / "hanging"))  # run 1 reported steps 1-8, then hangs
        # Reports are shipped from a background thread: kill the master once it has stored
        # run 1's last ones (training and validation at step 8), not while they are in flight.
        [first] = cluster.trials(exp_id)
        deadline = time.monotonic() + 30

        def stored_step_8(group: str) -> bool:
            return (8, 1) in _rows(m, first["id"], group, archived=False)

        while not (stored_step_8("training") and stored_step_8("validation")):
            assert time.monotonic() < deadline, "run 1's reports of step 8 never arrived"
            time.sleep(0.05)
        m.kill()
        m.start()
        wait_dead(pid, timeout=10)  # the restarted master killed the orphaned run
        cluster = Cluster(m)
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        [trial] = cluster.trials(exp_id)
        tid = trial["id"]
        assert env_of(out, tid, 2)["DET_STEPS_COMPLETED"] == "5"
        assert trial["restarts"] == 0  # the master's own kill is no failure

        live = _rows(m, tid, "training", archived=False)
        assert live == [(s, 1 if s <= 5 else 2) for s in range(1, 13)]  # each step once
        every = _rows(m, tid, "training", archived=True)
        assert sorted(set(every) - set(live)) == [(6, 1), (7, 1), (8, 1)]  # archived
        assert _rows(m, tid, "validation", archived=False) == [(4, 1), (8, 2), (12, 2)]
        assert set(_rows(m, tid, "validation", archived=True)) - {(4, 1), (8, 2), (12, 2)} == {
            (8, 1)
        }
        assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 12
        assert trial["summaryMetrics"]["validation_metrics"]["loss"]["count"] == 3
        assert trial["totalBatchesProcessed"] == 12
    finally:
        m.stop()
