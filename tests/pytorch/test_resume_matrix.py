"""Exact resume, as a matrix (issue 32): {shuffle, workers with augmentation, dropout} x
{mid-epoch, the first epoch's end, inside the second epoch} x {local, on a master} x {1 rank,
2 ranks}. A resumed run ends with bitwise the weights and optimizer state of the uninterrupted
run that wrote its checkpoint, in processes whose torch, numpy and python RNGs were seeded at
random, and with no experiment_seed locally (the run picks its data seed and keeps it in the
checkpoint: docs/pytorch/data.md). The trial: tests/_kit/resume_trial.py.

The one-rank local cells run in this process (each run reseeds the global RNGs at random);
the two-rank local cells share one pair of gloo processes; the master cells resume one trial
three times (the master restarts it after each of its first checkpoints) and compare every
checkpoint with an uninterrupted experiment's."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import torch
from _kit import resume_matrix
from _kit.master import MasterProcess, free_port
from _kit.trial_cluster import Cluster

from determined.common import _paths
from determined.pytorch import Batch

RESUME_TRIAL = pathlib.Path(__file__).parents[1] / "_kit" / "resume_trial.py"
WORKER = pathlib.Path(__file__).parents[1] / "_kit" / "resume_worker.py"


@pytest.mark.parametrize("kind", resume_matrix.KINDS)
def test_local_one_rank_resumes_bitwise(kind: str) -> None:
    result = resume_matrix.cells(kind, ranks=1)
    assert resume_matrix.mismatches(result, ranks=1) == []


def test_local_runs_keep_their_data_seed_in_the_checkpoint() -> None:
    """Without experiment_seed each run picks its own data seed (two runs shuffle apart) and
    a resumed run takes the one its checkpoint kept."""
    a, uuids = resume_matrix.run("shuffle", 4, checkpoint_period=Batch(2))
    b, _ = resume_matrix.run("shuffle", 4)
    assert a.losses != b.losses  # another seed: another order
    kept = {
        u: json.loads((_paths.default_checkpoint_dir() / u / "trial_state.json").read_text())
        for u in uuids
    }
    seeds = {k["data_seed"] for k in kept.values()}
    assert len(seeds) == 1 and isinstance(seeds.pop(), int)


@pytest.mark.e2e
def test_local_two_ranks_resume_bitwise(tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k != "RANK"}
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        GROUP_RANK="0",
        GROUP_WORLD_SIZE="1",
        USE_TORCH_DISTRIBUTED="1",
        INTER_TRAIN_PROCESS_COMM_PORT_1=str(free_port()),
        INTER_TRAIN_PROCESS_COMM_PORT_2=str(free_port()),
        DET_HOME=str(tmp_path / "det_home"),
        OMP_NUM_THREADS="1",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp_path / f"rank{r}.json")],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
        )
        for r in range(2)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    for r in range(2):
        result = json.loads((tmp_path / f"rank{r}.json").read_text())
        bad = {kind: resume_matrix.mismatches(result[kind], ranks=2) for kind in result}
        assert bad == {kind: [] for kind in resume_matrix.KINDS}, f"rank {r}"


# ---- on a master -------------------------------------------------------------------------------


def _experiment(ranks: int, crash: bool) -> dict[str, Any]:
    points, length = resume_matrix.plan(ranks)
    return {
        "name": f"resume-{ranks}-{'crash' if crash else 'straight'}",
        "entrypoint": "model_def:ResumeTrial",
        "max_restarts": len(points) if crash else 0,
        "resources": {"slots_per_trial": ranks},
        "reproducibility": {"experiment_seed": 2024},  # both experiments: one trial seed
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": length}},
        "min_checkpoint_period": {"batches": points[0]},
        "hyperparameters": {
            "kind": "all",
            "n": resume_matrix.N,
            "batch_size": resume_matrix.BATCH,
            "global_batch_size": resume_matrix.BATCH * ranks,
            "crash_at": points if crash else [],
        },
    }


def _checkpoints(cluster: Cluster, storage: pathlib.Path, exp_id: int) -> dict[int, Any]:
    [trial] = cluster.trials(exp_id)
    ckpts = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    out = {}
    for c in ckpts:
        if c["state"] == "STATE_COMPLETED":
            s = torch.load(storage / c["uuid"] / "state_dict.pth", weights_only=False)
            out[int(c["metadata"]["steps_completed"])] = s
    return out


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.e2e
def test_on_a_master_a_restarted_trial_resumes_bitwise(tmp_path: pathlib.Path) -> None:
    """Shuffle, workers with augmentation and dropout together, on 1 and 2 slots: a trial that
    dies after each of its first three checkpoints (mid-epoch, at the first epoch's end,
    inside the second epoch) and is restarted from it by the master writes every later
    checkpoint bitwise equal (models and optimizer state) to an uninterrupted trial's."""
    storage = tmp_path / "ckpts"
    files = {"model_def.py": RESUME_TRIAL.read_text()}
    with MasterProcess(tmp_path / "master", cpu_slots=6) as m:  # all four at once
        cluster = Cluster(m)
        exps = {}
        for ranks in (1, 2):
            for crash in (False, True):
                config = _experiment(ranks, crash)
                config["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(storage)}
                exps[ranks, crash] = cluster.create(config, files)
        for (_ranks, crash), exp_id in exps.items():
            exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=300)
            [trial] = cluster.trials(exp_id)
            logs = "".join(e["log"] for e in cluster.logs(trial["taskId"]))
            assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
            assert trial["restarts"] == (3 if crash else 0), logs[-3000:]
        for ranks in (1, 2):
            points, length = resume_matrix.plan(ranks)
            straight = _checkpoints(cluster, storage, exps[ranks, False])
            restarted = _checkpoints(cluster, storage, exps[ranks, True])
            assert sorted(restarted) == sorted(straight)
            assert max(straight) == length
            for step, want in straight.items():
                got = restarted[step]
                for key in ("models_state_dict", "optimizers_state_dict"):
                    assert _equal(want[key], got[key]), f"{ranks} ranks, batch {step}: {key}"
