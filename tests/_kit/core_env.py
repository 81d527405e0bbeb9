"""The trial a master describes to the Core API tests: ids and config.

Test modules import these from here, not from ``conftest``: pytest imports every directory's
``conftest.py`` under the one name ``conftest``, so ``from conftest import X`` picks up whichever
was loaded first when the whole suite runs.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

ALLOCATION_ID = "7.abc.1"
TRIAL_ID = 3
EXPERIMENT_ID = 7


def trial_config(storage_dir: pathlib.Path, **searcher: Any) -> dict[str, Any]:
    return {
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage_dir)},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}, **searcher},
        "hyperparameters": {"lr": 0.1},
        "data": {"url": "file:///data"},
    }


def trial_env(master_url: str, storage_dir: pathlib.Path) -> dict[str, str]:
    """The ``DET_*`` environment our master gives trial 3 of experiment 7."""
    return {
        "DET_MASTER": master_url,
        "DET_CLUSTER_ID": "cluster-1",
        "DET_AGENT_ID": "agent-1",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "7.abc",
        "DET_ALLOCATION_ID": ALLOCATION_ID,
        "DET_SESSION_TOKEN": "alloc-token",
        "DET_TASK_TYPE": "TRIAL",
        "DET_TRIAL_ID": str(TRIAL_ID),
        "DET_EXPERIMENT_ID": str(EXPERIMENT_ID),
        "DET_TRIAL_SEED": "42",
        "DET_HPARAMS": json.dumps({"lr": 0.1}),
        "DET_EXPERIMENT_CONFIG": json.dumps(trial_config(storage_dir)),
        "DET_STEPS_COMPLETED": "0",
        "DET_TRIAL_RUN_ID": "1",
    }
