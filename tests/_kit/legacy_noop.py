"""The port of Determined 0.37's e2e no-op legacy trial (tests/fixtures/legacy_noop) as the
master tests submit it: its config and model definition."""

from __future__ import annotations

import pathlib
from typing import Any

from _kit.trial_cluster import Cluster

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "legacy_noop" / "model_def.py"


def noop_config(storage: pathlib.Path, **changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "legacy-noop",
        "entrypoint": "model_def:NoOpTrial",
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        "hyperparameters": {
            "global_batch_size": 32,
            "metrics_progression": "decreasing",
            "metrics_base": 0.9,
        },
        "searcher": {
            "name": "single",
            "metric": "validation_error",
            "smaller_is_better": True,
            "max_length": {"batches": 30},
        },
        "scheduling_unit": 5,
        "min_validation_period": {"batches": 10},
        "min_checkpoint_period": {"batches": 20},
        "max_restarts": 0,
    }
    config.update(changes)
    return config


def noop_files() -> dict[str, str]:
    return {"model_def.py": FIXTURE.read_text()}


def trial_logs(cluster: Cluster, trial: dict[str, Any]) -> str:
    return "".join(e["log"] for e in cluster.logs(trial["taskId"]))
