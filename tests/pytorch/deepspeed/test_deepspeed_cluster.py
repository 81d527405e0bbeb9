"""DeepSpeedTrial as experiments on a real master: two ranks through
``determined.launch.deepspeed`` on DeepSpeed's CPU accelerator (gloo), ZeRO stages 1 and 2,
one Determined checkpoint holding every rank's shards, and a rank killed mid-run resuming
from it to the same weights and metrics as a run that was never interrupted."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess
from _kit.trial_cluster import Cluster

pytest.importorskip("deepspeed")

pytestmark = pytest.mark.e2e

MODEL_DEF = pathlib.Path(__file__).parent / "model_def"


@pytest.fixture(scope="module")
def ds_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with MasterProcess(tmp_path_factory.mktemp("ds") / "master", cpu_slots=6) as m:
        yield Cluster(m)


@pytest.fixture(scope="module")
def experiments(ds_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """The module's three two-rank experiments, started side by side (the master has a slot
    for each rank): ZeRO 1; ZeRO 2 straight; ZeRO 2 with rank 0 killed at batch 3."""
    tmp = tmp_path_factory.mktemp("ds-storage")
    return {
        "zero1": _create(ds_cluster, _config(tmp / "zero1", 1)),
        "straight": _create(ds_cluster, _config(tmp / "straight", 2)),
        "killed": _create(ds_cluster, _config(tmp / "killed", 2, crash_at_batch=3)),
    }


def _config(storage: pathlib.Path, stage: int, **hparams: Any) -> dict[str, Any]:
    return {
        "name": f"deepspeed-zero{stage}",
        "entrypoint": "python3 -m determined.launch.deepspeed --trial model_def:Trial",
        "resources": {"slots_per_trial": 2},
        "max_restarts": 1,
        # One trial seed for every experiment: it seeds the model and the data order.
        "reproducibility": {"experiment_seed": 7},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        "min_checkpoint_period": {"batches": 2},
        "min_validation_period": {"batches": 2},
        "searcher": {
            "name": "single",
            "metric": "val_loss",
            "max_length": {"batches": 6},
        },
        "hyperparameters": {"zero_stage": stage, **hparams},
    }


def _create(cluster: Cluster, cfg: dict[str, Any]) -> int:
    return cluster.create(cfg, {"model_def.py": (MODEL_DEF / "model_def.py").read_text()})


def _validations(cluster: Cluster, trial_id: int) -> dict[int, dict[str, float]]:
    """Validation metrics by batch count (the NDJSON stream of 0.37's metrics route)."""
    r = cluster.s.get(
        cluster.url + f"/api/v1/trials/metrics/validation_metrics?trialIds={trial_id}"
    )
    assert r.status_code == 200, r.text
    out = {}
    for line in r.text.splitlines():
        for row in json.loads(line)["result"]["metrics"]:
            out[int(row["totalBatches"])] = _values(row["metrics"])
    return out


def _checkpoints(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    return list(cluster.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])


@pytest.mark.timeout(600)
def test_zero1_two_ranks_writes_one_checkpoint_with_every_rank_shard(
    ds_cluster: Cluster, experiments: dict[str, int]
) -> None:
    exp_id = experiments["zero1"]
    ds_cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=400)
    trial = ds_cluster.trials(exp_id)[0]
    ckpts = _checkpoints(ds_cluster, trial["id"])
    assert [int(c["metadata"]["steps_completed"]) for c in ckpts] == [2, 4, 6]
    files = set(ckpts[-1]["resources"])
    for rank in (0, 1):
        assert f"det_state_dict_rank{rank}.pth" in files
        assert f"model0/zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" in files
    assert "model0/mp_rank_00_model_states.pt" in files
    # wrap_rank tagged each worker's lines with its rank.
    ranks = {str(e.get("rankId")) for e in ds_cluster.logs(str(trial["taskId"]))}
    assert {"0", "1"} <= ranks, ranks


@pytest.mark.timeout(600)
def test_zero2_killed_rank_resumes_to_the_uninterrupted_result(
    ds_cluster: Cluster, experiments: dict[str, int]
) -> None:
    straight, resumed = experiments["straight"], experiments["killed"]
    for exp_id in (straight, resumed):
        ds_cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=500)
    a = ds_cluster.trials(straight)[0]
    b = ds_cluster.trials(resumed)[0]
    assert a["restarts"] == 0 and b["restarts"] == 1
    va, vb = _validations(ds_cluster, a["id"]), _validations(ds_cluster, b["id"])
    assert sorted(va) == [2, 4, 6]
    assert va[6] == vb[6]  # the same weights, bit for bit, after the restart at batch 2


def _values(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metric values of one report of the stream (keyed by its group's name there)."""
    (values,) = (v for k, v in metrics.items() if k != "batch_metrics")
    return dict(values)
