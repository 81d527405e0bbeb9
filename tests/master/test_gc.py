"""determined/master/resources/_gc.py: the keep/delete policy of docs/reference/master.md §4.7,
and GC at the end of a real experiment (files deleted from storage, records DELETED)."""

from __future__ import annotations

import pathlib
import time

import pytest
from _kit.trial_cluster import GC_PY, Cluster, config

from determined.master.resources import Candidate, select_deletions


def _cands(trial_id: int, metrics: list[float | None]) -> list[Candidate]:
    return [
        Candidate(f"t{trial_id}s{steps}", trial_id, steps, metric, order=trial_id * 100 + steps)
        for steps, metric in enumerate(metrics, 1)
    ]


def test_policy_keeps_latest_trial_best_and_experiment_best() -> None:
    cands = _cands(1, [5.0, 1.0, 4.0, 2.0, 3.0]) + _cands(2, [0.5, 9.0, None])
    doomed = select_deletions(cands, experiment_best=2, trial_best=1, trial_latest=1)
    kept = {c.uuid for c in cands} - doomed
    # latest: t1s5, t2s3; trial best: t1s2, t2s1; experiment best 2: t2s1 (0.5), t1s2 (1.0).
    assert kept == {"t1s5", "t2s3", "t1s2", "t2s1"}


def test_policy_larger_is_better_and_ties_by_validation_order() -> None:
    cands = _cands(1, [3.0, 7.0, 7.0, 1.0])
    doomed = select_deletions(
        cands, experiment_best=0, trial_best=1, trial_latest=0, smaller_is_better=False
    )
    assert {c.uuid for c in cands} - doomed == {"t1s2"}  # the first of the tied 7.0s


def test_policy_zero_keeps_nothing_and_unvalidated_are_never_best() -> None:
    cands = _cands(1, [None, None, 2.0])
    assert select_deletions(cands, experiment_best=0, trial_best=0, trial_latest=0) == {
        "t1s1",
        "t1s2",
        "t1s3",
    }
    doomed = select_deletions(cands, experiment_best=5, trial_best=5, trial_latest=0)
    assert doomed == {"t1s1", "t1s2"}


@pytest.mark.e2e
def test_gc_at_experiment_end(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    storage = tmp_path / "ckpts"
    cfg = config(tmp_path / "out", max_length=5, losses=[5.0, 1.0, 4.0, 2.0, 3.0])
    cfg["entrypoint"] = "python3 gc.py"
    cfg["checkpoint_storage"] = {
        "type": "shared_fs",
        "host_path": str(storage),
        "save_experiment_best": 2,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }
    exp_id = cluster.create(cfg, {"gc.py": GC_PY})
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)

    def states() -> dict[int, str]:
        rows = cluster.get(f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
        return {c["metadata"]["steps_completed"]: c["state"] for c in rows}

    deadline = time.monotonic() + 15
    while list(states().values()).count("STATE_DELETED") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert states() == {
        1: "STATE_DELETED",
        2: "STATE_COMPLETED",  # trial best and experiment best
        3: "STATE_DELETED",
        4: "STATE_COMPLETED",  # second best of the experiment
        5: "STATE_COMPLETED",  # latest
    }
    rows = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    on_disk = {p.name for p in storage.iterdir() if (p / "metadata.json").exists()}
    assert on_disk == {c["uuid"] for c in rows if c["state"] == "STATE_COMPLETED"}
    assert cluster.trials(exp_id)[0]["checkpointCount"] == 3  # deleted ones are not counted
