"""A Hugging Face Trainer with DetCallback as experiments on a real master (the script is
written as for 0.37 and runs unchanged): metrics and checkpoints reported, one and two ranks,
a pause and an activation resuming to the same result as an uninterrupted run, and an adaptive
ASHA search stopping trials through the callback."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess
from _kit.trial_cluster import Cluster, model_definition

pytest.importorskip("transformers")

pytestmark = pytest.mark.e2e

SCRIPT = (pathlib.Path(__file__).parent / "hf_model_def" / "train.py").read_text()


@pytest.fixture(scope="module")
def hf_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with MasterProcess(tmp_path_factory.mktemp("hf") / "master", cpu_slots=6) as m:
        yield Cluster(m)


@pytest.fixture(scope="module")
def experiments(hf_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """The module's experiments, started side by side (the master has a slot for each rank):
    two identical one-rank runs (one to pause), a two-rank run and an adaptive ASHA search."""
    tmp = tmp_path_factory.mktemp("hf-storage")
    slow = {"save_steps": 3, "step_sleep": 1.0}
    asha = _config(tmp / "asha")
    asha["searcher"] = {
        "name": "adaptive_asha",
        "metric": "eval_loss",
        "smaller_is_better": True,
        "max_length": {"batches": 8},
        "max_trials": 3,
        "max_rungs": 2,
        "divisor": 2,
        "mode": "aggressive",
        "max_concurrent_trials": 2,
    }
    asha["hyperparameters"]["lr"] = {"type": "categorical", "vals": [0.0001, 0.01, 0.05]}
    return {
        "straight": _create(hf_cluster, _config(tmp / "a", **slow)),
        "paused": _create(hf_cluster, _config(tmp / "b", **slow)),
        "two_ranks": _create(hf_cluster, _config(tmp / "c", slots=2, filter_metrics=["loss"])),
        "asha": _create(hf_cluster, asha),
    }


def _config(storage: pathlib.Path, slots: int = 1, **hparams: Any) -> dict[str, Any]:
    return {
        "name": "hf-trainer",
        "entrypoint": "python3 -m determined.launch.torch_distributed python3 train.py",
        "resources": {"slots_per_trial": slots},
        "max_restarts": 0,
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        "searcher": {
            "name": "single",
            "metric": "eval_loss",
            "smaller_is_better": True,
            "max_length": {"batches": hparams.get("max_steps", 8)},
        },
        "hyperparameters": {"lr": 0.01, "max_steps": 8, **hparams},
    }


def _create(cluster: Cluster, cfg: dict[str, Any]) -> int:
    return cluster.create(cfg, {"train.py": SCRIPT})


def _metrics(cluster: Cluster, trial_id: int, group: str) -> dict[int, dict[str, Any]]:
    r = cluster.s.get(cluster.url + f"/api/v1/trials/metrics/{group}_metrics?trialIds={trial_id}")
    assert r.status_code == 200, r.text
    out: dict[int, dict[str, Any]] = {}
    for line in r.text.splitlines():
        for row in json.loads(line)["result"]["metrics"]:
            steps = int(row["totalBatches"])
            assert steps not in out, f"{group} metrics reported twice at step {steps}"
            out[steps] = _values(row["metrics"])
    return out


def _checkpoints(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    return list(cluster.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])


def _wait_checkpoint(cluster: Cluster, exp_id: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while True:
        trials = cluster.trials(exp_id)
        if trials and _checkpoints(cluster, trials[0]["id"]):
            return
        if time.monotonic() > deadline:
            raise AssertionError("no checkpoint yet\n" + cluster.describe(exp_id))
        time.sleep(0.5)


@pytest.mark.timeout(600)
def test_pause_and_activate_resume_to_the_uninterrupted_result(
    hf_cluster: Cluster, experiments: dict[str, int]
) -> None:
    straight, paused = experiments["straight"], experiments["paused"]
    _wait_checkpoint(hf_cluster, paused)
    assert hf_cluster.post(f"/api/v1/experiments/{paused}/pause").status_code == 200
    hf_cluster.wait_experiment(paused, "STATE_PAUSED", timeout=120)
    stopped_at = max(
        int(c["metadata"]["steps_completed"])
        for c in _checkpoints(hf_cluster, hf_cluster.trials(paused)[0]["id"])
    )
    assert stopped_at < 8, "the pause came too late to interrupt training"
    assert hf_cluster.post(f"/api/v1/experiments/{paused}/activate").status_code == 200
    for exp_id in (straight, paused):
        hf_cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=500)
    a, b = (hf_cluster.trials(e)[0] for e in (straight, paused))
    va, vb = (
        _metrics(hf_cluster, a["id"], "validation"),
        _metrics(hf_cluster, b["id"], "validation"),
    )
    assert sorted(va) == [4, 8] and sorted(vb) == [4, 8]
    assert va[8]["eval_loss"] == vb[8]["eval_loss"]
    ta, tb = _metrics(hf_cluster, a["id"], "training"), _metrics(hf_cluster, b["id"], "training")
    assert ta[8]["loss"] == tb[8]["loss"]
    ckpt = _checkpoints(hf_cluster, b["id"])[-1]
    assert int(ckpt["metadata"]["steps_completed"]) == 8
    assert ckpt["metadata"]["trial_id"] == b["id"]
    assert "checkpoint-8/my_data.json" in ckpt["resources"]


@pytest.mark.timeout(600)
def test_two_ranks_report_once_from_the_chief(
    hf_cluster: Cluster, experiments: dict[str, int]
) -> None:
    exp_id = experiments["two_ranks"]
    hf_cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=500)
    trial = hf_cluster.trials(exp_id)[0]
    training = _metrics(hf_cluster, trial["id"], "training")
    assert sorted(training) == list(range(1, 9))
    assert all(set(m) <= {"loss", "train_loss"} for m in training.values()), training
    validation = _metrics(hf_cluster, trial["id"], "validation")
    assert sorted(validation) == [4, 8] and set(validation[8]) == {"eval_loss"}
    steps = [int(c["metadata"]["steps_completed"]) for c in _checkpoints(hf_cluster, trial["id"])]
    assert steps == [4, 8]


@pytest.mark.timeout(600)
def test_adaptive_asha_stops_trials_through_the_callback(
    hf_cluster: Cluster, experiments: dict[str, int]
) -> None:
    exp_id = experiments["asha"]
    hf_cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=500)
    trials = hf_cluster.trials(exp_id)
    assert len(trials) == 3 and all(t["state"] == "STATE_COMPLETED" for t in trials)
    lengths = sorted(max(_metrics(hf_cluster, t["id"], "validation")) for t in trials)
    assert lengths[-1] == 8 and lengths[0] == 4, lengths  # ASHA stopped some at rung 1


def _values(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metric values of one report of the stream (keyed by its group's name there)."""
    (values,) = (v for k, v in metrics.items() if k != "batch_metrics")
    return dict(values)


EXAMPLES = pathlib.Path(__file__).parents[1] / "fixtures" / "example_configs"


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(EXAMPLES))
)
def test_the_master_accepts_0_37_example_configs_unchanged(
    hf_cluster: Cluster, path: pathlib.Path
) -> None:
    """What `det experiment create` sends, validated by the master without creating anything
    (the examples themselves need model downloads to run)."""
    body = {
        "config": path.read_text(),
        "modelDefinition": model_definition({"README.md": "example\n"}),
        "activate": False,
        "validateOnly": True,
    }
    r = hf_cluster.s.post(hf_cluster.url + "/api/v1/experiments", json=body)
    assert r.status_code == 200, r.text
