"""examples/legacy_trial runs as shipped on a real master: the minimal legacy TrialController
learns (issue 14)."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "legacy_trial"


def test_legacy_trial_example_learns(cluster: Cluster) -> None:
    """Untrained, the model's validation loss is about |w|^2 ~ 3.4; 200 batches of SGD bring
    it to the noise floor (0.01)."""
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    exp_id = cluster.create(config, {"model_def.py": (EXAMPLE / "model_def.py").read_text()})
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    [trial] = cluster.trials(exp_id)
    logs = "".join(e["log"] for e in cluster.logs(trial["taskId"]))
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    workloads = cluster.get(f"/api/v1/trials/{trial['id']}/workloads")["workloads"]
    validations = [w["validation"] for w in workloads if "validation" in w]
    assert [v["totalBatches"] for v in validations] == [0, 50, 100, 150, 200]
    losses = [v["metrics"]["avgMetrics"]["validation_loss"] for v in validations]
    assert losses[0] > 2 and losses[-1] < 0.05, losses
    checkpoints = [w["checkpoint"] for w in workloads if "checkpoint" in w]
    assert checkpoints and checkpoints[-1]["totalBatches"] == 200
    assert "saved checkpoint" in logs
