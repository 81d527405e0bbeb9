"""Trainer.fit on a cluster: a RecordingMaster plays the master
(docs/reference/harness.md §9, §12)."""

from __future__ import annotations

from typing import Any

import pytest
from _kit.pytorch_cluster import HPARAMS, Cluster
from _kit.pytorch_trials import MLPTrial

import determined as det
import determined.pytorch as det_torch
from determined.pytorch import Batch


def _fit(trial_cls: type = MLPTrial, **fit: Any) -> Any:
    with det_torch.init(hparams=HPARAMS) as ctx:
        trial = trial_cls(ctx)
        trial.reason = det_torch.Trainer(trial, ctx).fit(**fit)
    return trial


def test_follows_searcher_operations(cluster: Cluster) -> None:
    """§12 run: each op trains to its absolute length, validates, checkpoints and completes
    with the searcher metric; progress in batches; metrics at steps_completed."""
    cluster.ops([4, 10])
    trial = _fit(checkpoint_policy="none")
    assert trial.context.get_trial_seed() == 42
    assert [i for _, i in trial.events] == list(range(10))
    done = cluster.bodies("POST", r"/searcher/completed_operation")
    assert [d["op"]["length"] for d in done] == [4, 10]
    assert all(isinstance(d["searcherMetric"], float) for d in done)
    progress = cluster.bodies("POST", r"/trials/3/progress")
    assert progress == [{"progress": 4.0}, {"progress": 10.0}]
    metrics = cluster.bodies("POST", r"/trials/3/metrics")
    steps = [(m["group"], m["metrics"]["stepsCompleted"]) for m in metrics]
    assert steps == [("training", 4), ("validation", 4), ("training", 10), ("validation", 10)]
    assert len(cluster.bodies("POST", r"/api/v1/checkpoints")) == 2


def test_test_mode_is_refused_on_cluster(cluster: Cluster) -> None:
    """§19 item 42: on-cluster test_mode raises ValueError."""
    cluster.ops([4])
    with pytest.raises(ValueError, match="test_mode"):
        _fit(test_mode=True)


@pytest.mark.parametrize(("best", "checkpoints"), [(0.0, 1), (1e9, 5)])
def test_best_uses_the_experiment_best(cluster: Cluster, best: float, checkpoints: int) -> None:
    """§19 item 52: policy best checkpoints after a validation only when it beats the
    experiment-wide best fetched before reporting (end-of-op checkpoint always)."""
    cluster.master.route(
        "GET", r"/api/v1/experiments/7/searcher/best_searcher_validation_metric", {"metric": best}
    )
    cluster.ops([10])
    _fit(validation_period=Batch(2), checkpoint_policy="best")
    assert len(cluster.bodies("POST", r"/api/v1/checkpoints")) == checkpoints


class BadHP(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        out = super().train_batch(batch, epoch_idx, batch_idx)
        if batch_idx == 1:
            raise det.InvalidHP("diverged")
        return out


def test_invalid_hp_reports_early_exit(cluster: Cluster) -> None:
    """§19 item 66 on a cluster: checkpoint, early exit INVALID_HP, exit status 0."""
    cluster.ops([10])
    with pytest.raises(SystemExit) as exc:
        _fit(BadHP)
    assert exc.value.code == 0
    assert cluster.bodies("POST", r"/early_exit") == [{"reason": "EXITED_REASON_INVALID_HP"}]
    assert len(cluster.bodies("POST", r"/api/v1/checkpoints")) == 1


def test_preemption_checkpoints_and_returns_at_a_boundary(cluster: Cluster) -> None:
    """§19 item 63: preemption at a boundary -> checkpoint if not current, clean return, no
    more batches, and the op is left incomplete for the next run."""
    import time

    cluster.master.route("GET", r"/api/v1/allocations/[^/]+/signals/preemption", {"preempt": True})
    cluster.ops([10])
    with det_torch.init(hparams=HPARAMS) as ctx:
        trial = MLPTrial(ctx)
        time.sleep(0.2)  # let the watcher's first poll land
        reason = det_torch.Trainer(trial, ctx).fit(reporting_period=Batch(3))
    assert reason == det_torch.ExitReason.STOPPED
    assert [i for _, i in trial.events] == [0, 1, 2]
    (ckpt,) = cluster.bodies("POST", r"/api/v1/checkpoints")
    assert cluster.bodies("POST", r"/searcher/completed_operation") == []


def test_restart_after_the_last_validation_completes_the_op(cluster: Cluster) -> None:
    """Deviation (Q7): a restart whose checkpoint is already validated at the op's length
    validates again and completes the op on every rank, instead of exiting on the chief."""
    cluster.ops([4])
    _fit(checkpoint_policy="none")
    (first,) = cluster.bodies("POST", r"/api/v1/checkpoints")
    uuid = first["uuid"]
    cluster.ops([4])  # the master hands out the same op again
    trial = _fit(latest_checkpoint=uuid)
    assert trial.events == []
    done = cluster.bodies("POST", r"/searcher/completed_operation")
    assert [d["op"]["length"] for d in done] == [4, 4]


@pytest.mark.parametrize(
    ("unit", "ops", "batches", "progress"),
    [
        ("epochs", [1, 2], 20, [1.0, 2.0]),  # 10 batches per epoch
        ("records", [16, 24], 6, [16.0, 24.0]),  # global_batch_size 4
    ],
)
def test_searcher_units(
    cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
    unit: str,
    ops: list[int],
    batches: int,
    progress: list[float],
) -> None:
    """§12 run: op lengths in epochs or records (via global_batch_size); progress is reported
    in the op's unit."""
    import json

    from _kit.pytorch_cluster import config

    monkeypatch.setenv("DET_EXPERIMENT_CONFIG", json.dumps(config(cluster.storage, {unit: 1})))
    cluster.ops(ops)
    trial = _fit(checkpoint_policy="none")
    assert [i for _, i in trial.events] == list(range(batches))
    assert [p["progress"] for p in cluster.bodies("POST", r"/trials/3/progress")] == progress
    done = cluster.bodies("POST", r"/searcher/completed_operation")
    assert [d["op"]["length"] for d in done] == ops


def test_run_trial_takes_every_fit_argument_from_the_config(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§16 harness: min_validation_period, min_checkpoint_period, Batch(scheduling_unit),
    checkpoint_policy and perform_initial_validation come from the config; load_data.json has
    no is_trainer for harness runs (§19 item 57)."""
    import json

    from _kit.pytorch_cluster import config

    from determined.pytorch._harness import run_trial

    conf = config(cluster.storage)
    conf.update(
        min_validation_period={"batches": 4},
        min_checkpoint_period={"records": 20},  # 5 batches of global_batch_size 4
        scheduling_unit=3,
        checkpoint_policy="none",
        perform_initial_validation=True,
    )
    monkeypatch.setenv("DET_EXPERIMENT_CONFIG", json.dumps(conf))
    cluster.ops([10])
    assert run_trial(MLPTrial) == det_torch.ExitReason.COMPLETED
    metrics = cluster.bodies("POST", r"/trials/3/metrics")
    steps = [(m["group"][0], m["metrics"]["stepsCompleted"]) for m in metrics]
    assert steps == [("v", 0)] + [
        ("t", 3),
        ("t", 4),
        ("v", 4),
        ("t", 5),
        ("t", 6),
        ("t", 8),
        ("v", 8),
        ("t", 9),
        ("t", 10),
        ("v", 10),
    ]
    checkpoints = cluster.bodies("POST", r"/api/v1/checkpoints")
    assert [c["metadata"]["steps_completed"] for c in checkpoints] == [5, 10]
    path = cluster.storage / checkpoints[-1]["uuid"] / "load_data.json"
    assert "is_trainer" not in json.loads(path.read_text())


def _no_length_config(
    monkeypatch: pytest.MonkeyPatch, cluster: Cluster, **searcher: Any
) -> dict[str, Any]:
    """An experiment config without searcher.max_length (Determined 0.38 style)."""
    import json

    from _kit.pytorch_cluster import config

    conf = config(cluster.storage)
    del conf["searcher"]["max_length"]
    conf["searcher"]["name"] = "single"  # 0.38 has no custom searcher (a custom one sends ops)
    conf["searcher"].update(searcher)
    monkeypatch.setenv("DET_EXPERIMENT_CONFIG", json.dumps(conf))
    return conf


def test_without_searcher_max_length_fit_max_length_decides(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§17 (0.38, item 78): no searcher.max_length -> fit's max_length is the length; no
    searcher operation is asked for or completed; progress is the raw fraction done at each
    report; training and validation metrics gain batches and epochs keys."""
    _no_length_config(monkeypatch, cluster)
    trial = _fit(max_length=Batch(15), reporting_period=Batch(5), checkpoint_policy="none")
    assert trial.reason == det_torch.ExitReason.COMPLETED
    assert [i for _, i in trial.events] == list(range(15))
    assert cluster.master.find("GET", r"/searcher/operation") == []
    assert cluster.bodies("POST", r"/searcher/completed_operation") == []
    progress = cluster.bodies("POST", r"/trials/3/progress")
    assert progress == [
        {"progress": pytest.approx(f), "is_raw": True} for f in (5 / 15, 10 / 15, 1.0)
    ]
    metrics = cluster.bodies("POST", r"/trials/3/metrics")
    keyed = [(m["group"], m["metrics"]["metrics"]["avgMetrics"]) for m in metrics]
    assert [(g, a["batches"], a["epochs"]) for g, a in keyed] == [
        ("training", 5, 0),
        ("training", 10, 1),  # 10 batches per epoch
        ("training", 15, 1),
        ("validation", 15, 1),
    ]
    assert len(cluster.bodies("POST", r"/api/v1/checkpoints")) == 1


def test_without_searcher_max_length_an_epoch_length_reports_fractions(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_length_config(monkeypatch, cluster)
    trial = _fit(max_length=det_torch.Epoch(2), reporting_period=Batch(5))
    assert [i for _, i in trial.events] == list(range(20))
    progress = [p["progress"] for p in cluster.bodies("POST", r"/trials/3/progress")]
    assert progress == pytest.approx([0.25, 0.5, 0.75, 1.0])


@pytest.mark.parametrize("bad", [None, 10, "Batch(10)"])
def test_without_searcher_max_length_fit_needs_a_batch_or_epoch_length(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, bad: Any
) -> None:
    _no_length_config(monkeypatch, cluster)
    error = ValueError if bad is None else TypeError
    with pytest.raises(error, match="max_length"):
        _fit(max_length=bad)


def test_with_searcher_max_length_fit_max_length_is_ignored(cluster: Cluster) -> None:
    """0.37: the searcher's operations decide; fit's max_length is ignored with a warning."""
    cluster.ops([4])
    with pytest.warns(UserWarning, match="max_length is ignored"):
        trial = _fit(max_length=Batch(15), checkpoint_policy="none")
    assert [i for _, i in trial.events] == list(range(4))
    metrics = cluster.bodies("POST", r"/trials/3/metrics")
    assert all(
        "batches" not in m["metrics"]["metrics"]["avgMetrics"] for m in metrics
    )  # 0.37 metrics


def test_a_time_metric_search_keeps_its_operations_for_the_core_api(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """0.38 ASHA (time_metric + max_time): Trainer still trains fit's length, warning that it
    differs from max_time; the Core API still gets operations of max_time."""
    _no_length_config(monkeypatch, cluster, time_metric="batches", max_time=12)
    with caplog.at_level("WARNING", logger="determined.pytorch"):
        trial = _fit(max_length=Batch(6), checkpoint_policy="none")
    assert [i for _, i in trial.events] == list(range(6))
    assert "differs from searcher.time_metric" in caplog.text
    cluster.ops([12])
    with det.core.init() as core_context:
        assert [op.length for op in _first_op(core_context)] == [12]


def _first_op(core_context: Any) -> list[Any]:
    ops = []
    for op in core_context.searcher.operations():
        ops.append(op)
        op.report_completed(0.0)
        break
    return ops


def test_the_core_api_refuses_operations_without_a_searcher_length(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.38: searcher.operations() raises ValueError when the config has no length (and
    never tells the master it is out of work, which would schedule the trial again)."""
    _no_length_config(monkeypatch, cluster)
    with det.core.init() as core_context, pytest.raises(ValueError, match="no searcher.max_length"):
        next(iter(core_context.searcher.operations()))
    assert cluster.master.find("GET", r"/searcher/operation") == []
    assert cluster.master.find("POST", r"/signals/ack_preemption") == []


def test_status_is_posted_only_when_it_changes(cluster: Cluster) -> None:
    """Each status post is a request to the master: a report every 2 batches does not repeat
    "training"; the statuses follow what the loop does."""
    cluster.ops([8])
    _fit(reporting_period=Batch(2), validation_period=Batch(4), checkpoint_policy="all")
    states = [b["state"] for b in cluster.bodies("POST", r"/trials/3/runner/metadata")]
    assert states == ["training", "validating", "checkpointing"] * 2
