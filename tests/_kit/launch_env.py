"""The environment a master gives a trial process, for launcher tests that need cluster info."""

from __future__ import annotations

import json
import pathlib
from typing import Any


def trial_env(
    tmp_path: pathlib.Path,
    *,
    slots: int = 1,
    entrypoint: str | list[str] = "python3 train.py",
    container_addrs: list[str] | None = None,
    container_rank: int = 0,
    storage: dict[str, Any] | None = None,
) -> dict[str, str]:
    config = {
        "entrypoint": entrypoint,
        "checkpoint_storage": storage
        or {"type": "shared_fs", "host_path": str(tmp_path / "ckpts")},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "hyperparameters": {},
    }
    env = {
        "DET_MASTER": "http://127.0.0.1:9",
        "DET_CLUSTER_ID": "c",
        "DET_AGENT_ID": "a",
        "DET_SLOT_IDS": json.dumps(list(range(slots))),
        "DET_TASK_ID": "1.t",
        "DET_ALLOCATION_ID": f"1.t.{tmp_path.name}",
        "DET_SESSION_TOKEN": "tok",
        "DET_TASK_TYPE": "TRIAL",
        "DET_TRIAL_ID": "1",
        "DET_EXPERIMENT_ID": "1",
        "DET_TRIAL_SEED": "0",
        "DET_HPARAMS": "{}",
        "DET_EXPERIMENT_CONFIG": json.dumps(config),
        "DET_STEPS_COMPLETED": "0",
        "DET_TRIAL_RUN_ID": "1",
    }
    if container_addrs is not None:
        env["DET_CONTAINER_ADDRS"] = json.dumps(container_addrs)
        env["DET_CONTAINER_RANK"] = str(container_rank)
        env["DET_CONTAINER_SLOT_COUNTS"] = json.dumps([slots] * len(container_addrs))
    return env
