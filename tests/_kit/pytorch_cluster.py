"""The trial a RecordingMaster describes to the on-cluster Trainer tests (imported from here,
not from conftest: every directory's conftest shares one module name)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from _kit.recording_master import RecordingMaster, Request

TRIAL_ID, EXPERIMENT_ID = 3, 7
HPARAMS = {"lr": 0.01, "n": 40, "batch_size": 4, "global_batch_size": 4}


def config(storage: pathlib.Path, max_length: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "entrypoint": "model_def:Trial",  # a master always sends one; the harness parses it
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        "searcher": {
            "name": "custom",
            "metric": "val_loss",
            "smaller_is_better": True,
            "max_length": max_length or {"batches": 10},
        },
        "hyperparameters": HPARAMS,
    }


class Cluster:
    def __init__(self, master: RecordingMaster, storage: pathlib.Path) -> None:
        self.master, self.storage = master, storage
        self.lengths: list[int] = []

    def ops(self, lengths: list[int]) -> None:
        pending = list(lengths)

        def next_op(req: Request, _m: object) -> tuple[int, dict[str, Any]]:
            if not pending:
                return 200, {"completed": True}
            return 200, {"op": {"validateAfter": {"length": str(pending[0])}}, "completed": False}

        def completed(req: Request, _m: object) -> tuple[int, dict[str, Any]]:
            pending.pop(0)
            return 200, {}

        self.master.route("GET", rf"/api/v1/trials/{TRIAL_ID}/searcher/operation", next_op)
        self.master.route("POST", r"/searcher/completed_operation", completed)

    def bodies(self, method: str, path: str) -> list[Any]:
        return [r.body for r in self.master.find(method, path)]


def trial_env(master_url: str, storage: pathlib.Path) -> dict[str, str]:
    url = master_url
    env = {
        "DET_MASTER": url,
        "DET_CLUSTER_ID": "cluster-1",
        "DET_AGENT_ID": "agent-1",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "7.abc",
        "DET_ALLOCATION_ID": "7.abc.1",
        "DET_SESSION_TOKEN": "alloc-token",
        "DET_TASK_TYPE": "TRIAL",
        "DET_TRIAL_ID": str(TRIAL_ID),
        "DET_EXPERIMENT_ID": str(EXPERIMENT_ID),
        "DET_TRIAL_SEED": "42",
        "DET_HPARAMS": json.dumps(HPARAMS),
        "DET_EXPERIMENT_CONFIG": json.dumps(config(storage)),
        "DET_STEPS_COMPLETED": "0",
        "DET_TRIAL_RUN_ID": "1",
    }
    return env
