"""TrainContext: metric reports (async, checked), progress, status and early exits
(docs/reference/harness.md §6; §19 items 25-28)."""

from __future__ import annotations

import math
import time

import pytest
from _kit.core_env import TRIAL_ID
from _kit.recording_master import RecordingMaster

from determined import core, errors


def wait_for(m: RecordingMaster, method: str, path: str, n: int = 1) -> list:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = m.find(method, path)
        if len(found) >= n:
            return found
        time.sleep(0.02)
    raise AssertionError(f"expected {n} {method} {path}, got {len(m.find(method, path))}")


def test_training_metrics_body_on_the_wire(cluster_trial: RecordingMaster) -> None:
    with core.init() as ctx:
        ctx.train.report_training_metrics(
            steps_completed=10, metrics={"loss": 0.5}, batch_metrics=[{"loss": 0.6}, {"loss": 0.4}]
        )
    (req,) = cluster_trial.find("POST", rf"/api/v1/trials/{TRIAL_ID}/metrics")
    assert req.body == {
        "group": "training",
        "metrics": {
            "trialId": TRIAL_ID,
            "trialRunId": 1,
            "stepsCompleted": 10,
            "metrics": {
                "avgMetrics": {"loss": 0.5},
                "batchMetrics": [{"loss": 0.6}, {"loss": 0.4}],
            },
            "reportTime": None,
        },
    }
    assert req.header("Grpc-Metadata-x-allocation-token") == "Bearer alloc-token"


def test_validation_rejects_none_and_drops_bytes(cluster_trial: RecordingMaster) -> None:
    with core.init() as ctx:
        with pytest.raises(RuntimeError, match="'acc' returned an invalid scalar value: None"):
            ctx.train.report_validation_metrics(5, {"acc": None})
        ctx.train.report_validation_metrics(5, {"acc": 0.9, "blob": b"xx", "inf": math.inf})
    (req,) = cluster_trial.find("POST", r"/metrics")
    assert req.body["group"] == "validation"
    assert req.body["metrics"]["metrics"]["avgMetrics"] == {"acc": 0.9, "inf": "Infinity"}


def test_custom_group_and_bad_group_names(cluster_trial: RecordingMaster) -> None:
    with core.init() as ctx:
        ctx.train.report_metrics("inference", 3, {"latency": 1.5})
        with pytest.raises(ValueError, match="without '.'"):
            ctx.train.report_metrics("a.b", 3, {"x": 1})
    (req,) = cluster_trial.find("POST", r"/metrics")
    assert req.body["group"] == "inference"


def test_reports_are_asynchronous_and_errors_resurface_on_next_report(
    cluster_trial: RecordingMaster,
) -> None:
    cluster_trial.route("POST", r"/api/v1/trials/\d+/metrics", (400, {"message": "invalid run id"}))
    ctx = core.init()
    ctx.start()
    ctx.train.report_training_metrics(1, {"loss": 1.0})  # returns before the master answers
    wait_for(cluster_trial, "POST", r"/metrics")
    time.sleep(0.2)
    with pytest.raises(errors.BadRequest, match="invalid run id"):
        ctx.train.report_training_metrics(2, {"loss": 1.0})
    ctx.close()


def test_shipper_error_resurfaces_on_close(cluster_trial: RecordingMaster) -> None:
    cluster_trial.route("POST", r"/api/v1/trials/\d+/metrics", (400, {"message": "bad metrics"}))
    ctx = core.init()
    ctx.start()
    ctx.train.report_training_metrics(1, {"loss": 1.0})
    with pytest.raises(errors.BadRequest, match="bad metrics"):
        ctx.close()


def test_close_drains_every_queued_report(cluster_trial: RecordingMaster) -> None:
    with core.init() as ctx:
        for step in range(1, 51):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
    steps = [r.body["metrics"]["stepsCompleted"] for r in cluster_trial.find("POST", r"/metrics")]
    assert steps == list(range(1, 51))


def test_report_progress_range_and_body(cluster_trial: RecordingMaster) -> None:
    with core.init() as ctx:
        for bad in (-0.1, 1.5):
            with pytest.raises(ValueError, match="between 0 and 1"):
                ctx.train.report_progress(bad)
        ctx.train.report_progress(0.25)
    (req,) = cluster_trial.find("POST", rf"/api/v1/trials/{TRIAL_ID}/progress")
    assert req.body == {"progress": 0.25, "is_raw": True}


def test_status_early_exit_and_best_validation(cluster_trial: RecordingMaster) -> None:
    best = r"/api/v1/experiments/7/searcher/best_searcher_validation_metric"
    with core.init() as ctx:
        assert ctx.train.get_experiment_best_validation() is None  # 404: none yet
        cluster_trial.route("GET", best, {"metric": 0.125})
        assert ctx.train.get_experiment_best_validation() == 0.125
        ctx.train.set_status("validating")
        ctx.train.report_early_exit(core.EarlyExitReason.USER_REQUESTED_STOP)
        cluster_trial.route("POST", r"/early_exit", (400, {"message": "already reported"}))
        ctx.train.report_early_exit(core.EarlyExitReason.INVALID_HP)  # 400 only warns
    (status,) = cluster_trial.find("POST", r"/runner/metadata")
    assert status.body == {"state": "validating"}
    exits = [r.body for r in cluster_trial.find("POST", r"/early_exit")]
    assert exits == [
        {"reason": "EXITED_REASON_USER_REQUESTED_STOP"},
        {"reason": "EXITED_REASON_INVALID_HP"},
    ]


def test_last_validation_reads_trial(cluster_trial: RecordingMaster) -> None:
    cluster_trial.route(
        "GET", rf"/api/v1/trials/{TRIAL_ID}$", {"trial": {"latestValidation": {"totalBatches": 40}}}
    )
    with core.init() as ctx:
        assert ctx.train._get_last_validation() == 40


def test_upload_tensorboard_files_in_auto_mode_raises(cluster_trial: RecordingMaster) -> None:
    with core.init() as ctx, pytest.raises(RuntimeError, match="MANUAL"):
        ctx.train.upload_tensorboard_files()


def test_local_train_context_logs_and_has_no_experiment(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="determined.core")
    with core.init() as ctx:
        ctx.train.report_training_metrics(4, {"loss": 2.0})
        ctx.train.report_validation_metrics(4, {"val_loss": 1.0, "blob": b"x"})
        assert ctx.train.get_experiment_best_validation() is None
        assert ctx.train._get_last_validation() is None
        with pytest.raises(RuntimeError):
            ctx.train.report_validation_metrics(4, {"val_loss": None})
    assert "training metrics at step 4: {'loss': 2.0}" in caplog.text
    assert "'val_loss': 1.0" in caplog.text and "blob" in caplog.text  # the drop is logged
