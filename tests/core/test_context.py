"""core.init() and core.Context (docs/reference/harness.md §2; §19 items 2-5)."""

from __future__ import annotations

import os
import pathlib
import uuid

import pytest
from _kit.core_env import TRIAL_ID
from _kit.recording_master import RecordingMaster

import determined as det
from determined import core


def test_local_init_is_a_single_process_context() -> None:
    with core.init() as ctx:
        assert ctx.info is None
        assert ctx.distributed.get_rank() == 0
        assert ctx.distributed.get_size() == 1
        assert ctx.distributed.allgather("x") == ["x"]


def test_local_checkpoints_go_to_the_data_dir() -> None:
    with (
        core.init() as ctx,
        ctx.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id),
    ):
        (path / "weights").write_text("w")
    uuid.UUID(storage_id)
    stored = pathlib.Path(os.environ["DET_HOME"]) / "checkpoints" / storage_id
    assert (stored / "weights").read_text() == "w"
    assert (stored / "metadata.json").exists()


def test_local_checkpoint_storage_argument(tmp_path: pathlib.Path) -> None:
    with (
        core.init(checkpoint_storage=str(tmp_path / "ckpts")) as ctx,
        ctx.checkpoint.store_path({"steps_completed": 1}) as (_path, storage_id),
    ):
        pass
    assert (tmp_path / "ckpts" / storage_id / "metadata.json").exists()


@pytest.mark.parametrize(
    ("arg", "error"),
    [
        ({"type": "shared_fs", "host_path": "/tmp"}, ValueError),
        ("ftp://host/path", ValueError),
        ({"type": "nonsense"}, TypeError),
    ],
)
def test_bad_storage_arguments(arg: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        core.init(checkpoint_storage=arg)  # type: ignore[arg-type]


def test_local_tensorboard_files_in_auto_mode() -> None:
    with core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        tb = ctx.train.get_tensorboard_path()
    assert tb is not None
    assert tb.is_relative_to(pathlib.Path(os.environ["DET_HOME"]) / "tensorboard")
    assert any(p.name.startswith("events.out.tfevents") for p in tb.rglob("*"))


def test_local_manual_tensorboard_mode_writes_nothing() -> None:
    with core.init(tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        assert ctx.train.get_tensorboard_path() is None
    assert not (pathlib.Path(os.environ["DET_HOME"]) / "tensorboard").exists()


def test_local_preempt_mode_is_honoured() -> None:
    with core.init(preempt_mode=core.PreemptMode.ChiefOnly) as ctx:
        assert ctx.preempt._mode == core.PreemptMode.ChiefOnly


def test_invalid_hp_exits_zero_after_reporting(cluster_trial: RecordingMaster) -> None:
    with pytest.raises(SystemExit) as exc, core.init():
        raise det.InvalidHP("lr too large")
    assert exc.value.code == 0
    (req,) = cluster_trial.find("POST", rf"/api/v1/trials/{TRIAL_ID}/early_exit")
    assert req.body == {"reason": "EXITED_REASON_INVALID_HP"}


def test_other_exceptions_propagate(cluster_trial: RecordingMaster) -> None:
    with pytest.raises(KeyError), core.init():
        raise KeyError("boom")
    assert cluster_trial.find("POST", r"/early_exit") == []


def test_cluster_init_calls_runs_start(cluster_trial: RecordingMaster) -> None:
    with core.init() as ctx:
        assert ctx.info is not None and ctx.info.trial.trial_id == TRIAL_ID
    (req,) = cluster_trial.find("POST", r"/api/v1/runs/start")
    assert req.body["runId"] == TRIAL_ID
    assert req.body["checkpointStorage"]["type"] == "shared_fs"


def test_multi_slot_trial_needs_a_distributed_context(
    cluster_trial: RecordingMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_SLOT_IDS", "[0, 1]")
    with pytest.raises(ValueError, match="distributed"):
        core.init()


def test_cluster_checkpoint_is_reported(cluster_trial: RecordingMaster) -> None:
    with (
        core.init() as ctx,
        ctx.checkpoint.store_path({"steps_completed": 5}) as (path, storage_id),
    ):
        (path / "w").write_bytes(b"1234")
    (req,) = cluster_trial.find("POST", r"/api/v1/checkpoints$")
    assert req.body["uuid"] == storage_id
    assert req.body["resources"]["w"] == "4"
    assert req.body["metadata"]["steps_completed"] == 5
    assert req.body["storageId"] == 1


def test_non_trial_task_gets_local_parts_and_tells_the_master_nothing(
    cluster_trial: RecordingMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command or notebook on a cluster (§2): no runs/start, dummy train and searcher,
    never preempted, checkpoints stored in the data dir but not reported."""
    monkeypatch.setenv("DET_TASK_TYPE", "COMMAND")
    with core.init() as ctx:
        assert ctx.info is not None and ctx.info.task_type == "COMMAND"
        assert isinstance(ctx.train, core.DummyTrainContext)
        assert ctx.preempt.should_preempt() is False
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        lengths = []
        for op in ctx.searcher.operations():
            lengths.append(op.length)
            op.report_completed(0.0)
        assert lengths == [1]
        with ctx.checkpoint.store_path({}) as (path, storage_id):
            (path / "w").write_text("w")
    stored = pathlib.Path(os.environ["DET_HOME"]) / "checkpoints" / storage_id
    assert (stored / "w").read_text() == "w"
    assert cluster_trial.requests == []
