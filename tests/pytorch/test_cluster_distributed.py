"""A 2-slot trial on a RecordingMaster: two real processes, gloo, the harness path
(docs/reference/harness.md §9)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from _kit.master import free_port
from _kit.pytorch_cluster import Cluster, trial_env

pytestmark = pytest.mark.e2e

WORKER = pathlib.Path(__file__).parents[1] / "_kit" / "cluster_worker.py"


def test_two_slot_trial_reports_once_from_the_chief(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """§9 on-cluster: USE_TORCH_DISTRIBUTED -> init_process_group("gloo") and
    from_torch_distributed; both ranks follow the chief's searcher op; only the chief reports
    metrics, progress and the checkpoint, which holds both ranks' RNG files. The process
    group it started is ended before run_trial returns."""
    cluster.ops([6])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(trial_env(cluster.master.url, cluster.storage))
    env.update(
        DET_SLOT_IDS="[0, 1]",
        DET_HOME=str(tmp_path / "home"),
        USE_TORCH_DISTRIBUTED="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        GROUP_RANK="0",
        GROUP_WORLD_SIZE="1",
        INTER_TRAIN_PROCESS_COMM_PORT_1=str(free_port()),
        INTER_TRAIN_PROCESS_COMM_PORT_2=str(free_port()),
        OMP_NUM_THREADS="1",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp_path / f"rank{r}.json")],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
        )
        for r in range(2)
    ]
    assert [p.wait(timeout=240) for p in procs] == [0, 0]
    for r in range(2):
        out = json.loads((tmp_path / f"rank{r}.json").read_text())
        # the process group run_trial started is ended by it (a barrier, then destroyed)
        assert out == {"reason": "completed", "events": list(range(6)), "group_left": False}
    done = cluster.bodies("POST", r"/searcher/completed_operation")
    assert [d["op"]["length"] for d in done] == [6]
    metrics = cluster.bodies("POST", r"/trials/3/metrics")
    assert [(m["group"], m["metrics"]["stepsCompleted"]) for m in metrics] == [
        ("training", 6),
        ("validation", 6),
    ]
    (ckpt,) = cluster.bodies("POST", r"/api/v1/checkpoints")
    stored = cluster.storage / ckpt["uuid"]
    assert {p.name for p in (stored / "rng_state").iterdir()} == {"rank-0.pth", "rank-1.pth"}
    assert (stored / "state_dict.pth").is_file()
