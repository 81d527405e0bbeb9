"""The training loop run locally with real torch training (docs/reference/harness.md §12, §15)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _kit.pytorch_trials import MLPTrial, run_local

import determined as det
import determined.pytorch as det_torch
from determined.pytorch import Batch, Epoch


def _validated_at(log: list[tuple[Any, ...]]) -> list[int]:
    """Batches trained at each validation, from the callback log."""
    trained, out = 0, []
    for e in log:
        if e[0] == "on_training_workload_end":
            trained += e[1]
        elif e[0] == "on_validation_start":
            out.append(trained)
    return out


def _checkpointed_at(log: list[tuple[Any, ...]]) -> list[int]:
    trained, out = 0, []
    for e in log:
        if e[0] == "on_training_workload_end":
            trained += e[1]
        elif e[0] == "on_checkpoint_upload_end":
            out.append(trained)
    return out


def test_policy_none_validates_at_periods_and_checkpoints_once_at_the_end() -> None:
    """§19 item 45: Batch(10), validation Batch(4), policy none -> validations at 4, 8, 10 and
    one checkpoint, at 10."""
    _, cap, log = run_local(validation_period=Batch(4), checkpoint_policy="none")
    assert _validated_at(log) == [4, 8, 10]
    assert _checkpointed_at(log) == [10]
    assert len(cap.validation) == 3


def test_policy_all_checkpoints_after_each_validation() -> None:
    """§19 items 45 and 52: policy all checkpoints after every validation."""
    _, cap, log = run_local(validation_period=Batch(4), checkpoint_policy="all")
    assert _checkpointed_at(log) == [4, 8, 10]
    assert len(set(cap.uuids)) == 3


def test_policy_best_checkpoints_only_on_improvement() -> None:
    """§19 item 52 (deviation: local "best" works when searcher.metric is configured): a
    checkpoint follows a validation only if it strictly beats the best so far."""
    conf = {"searcher": {"metric": "val_loss", "smaller_is_better": False}}
    # With smaller_is_better False and a falling loss, only the first validation "wins".
    _, cap, log = run_local(
        hparams={"lr": 0.01},
        exp_conf=conf,
        validation_period=Batch(2),
        checkpoint_policy="best",
    )
    losses = [v["val_loss"] for v in cap.validation]
    assert losses == sorted(losses, reverse=True)  # training improves the loss every time
    assert _validated_at(log) == [2, 4, 6, 8, 10]
    assert _checkpointed_at(log) == [2, 10]  # the first win, then the end-of-op checkpoint


def test_policy_best_without_metric_behaves_as_all() -> None:
    """§19 item 42: local "best" without a searcher metric behaves as "all"."""
    _, _, log = run_local(validation_period=Batch(5), checkpoint_policy="best")
    assert _checkpointed_at(log) == [5, 10]


def test_train_batch_sees_global_indices_and_epochs() -> None:
    """§19 items 46 and 49: idx 0..9 with epoch_idx = idx // epoch_len; Epoch(2) with 5
    batches per epoch trains 10 batches; epoch hooks at 0/5 and 4/9."""
    trial, _, log = run_local(hparams={"n": 20}, max_length=Epoch(2))
    assert trial.events == [(i // 5, i) for i in range(10)]
    assert [e for e in log if e[0] == "on_training_epoch_start"] == [
        ("on_training_epoch_start", 0),
        ("on_training_epoch_start", 1),
    ]
    ends = [i for i, e in enumerate(log) if e[0] == "on_training_epoch_end"]
    assert [log[i][1] for i in ends] == [0, 1]


class _OldStyleEpochStart(det_torch.PyTorchCallback):
    """A callback written before 0.17.8: ``on_training_epoch_start`` takes no epoch index."""

    def __init__(self) -> None:
        self.calls = 0

    def on_training_epoch_start(self) -> None:  # type: ignore[override]
        self.calls += 1


class _OldStyleTrial(MLPTrial):
    def build_callbacks(self) -> dict[str, det_torch.PyTorchCallback]:
        self.old = _OldStyleEpochStart()
        return {**super().build_callbacks(), "old": self.old}


def test_an_epoch_start_hook_without_the_epoch_argument_still_runs() -> None:
    """0.37 detects the old signature and calls it without the index, with a deprecation
    warning; here the warning comes once per callback, not once per epoch."""
    with pytest.warns(FutureWarning, match="'old': on_training_epoch_start\\(\\) without "):
        trial, _, log = run_local(_OldStyleTrial, hparams={"n": 20}, max_length=Epoch(3))
    assert trial.old.calls == 3
    # The new-style hook of the other callback still gets the index.
    assert [e[1] for e in log if e[0] == "on_training_epoch_start"] == [0, 1, 2]


def test_training_metrics_at_every_boundary() -> None:
    """§19 items 47 and 48: metrics at every boundary (report every 3, validate every 4),
    avg is the batch mean, one batch_metrics entry per batch, Tensor -> loss."""
    _, cap, _ = run_local(reporting_period=Batch(3), validation_period=Batch(4))
    sizes = [len(b) for _, b in cap.training]
    assert sizes == [3, 1, 2, 2, 1, 1]  # boundaries at 3, 4, 6, 8, 9, 10
    for avg, batches in cap.training:
        assert set(avg) == {"loss"}
        assert avg["loss"] == pytest.approx(sum(b["loss"] for b in batches) / len(batches))


class DictMetricsTrial(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        loss = super().train_batch(batch, epoch_idx, batch_idx)
        return {"loss": loss, "maybe": None if batch_idx % 2 else 1.0, "name": "x"}


def test_average_ignores_none_and_non_numbers() -> None:
    """§19 item 48: None values are skipped; a value that cannot be averaged becomes None."""
    _, cap, _ = run_local(DictMetricsTrial, reporting_period=Batch(4), max_length=Batch(4))
    avg, batches = cap.training[0]
    assert avg["maybe"] == 1.0
    assert avg["name"] is None
    assert [b["maybe"] for b in batches] == [1.0, None, 1.0, None]


def test_step_zero_validation() -> None:
    """§19 item 54: step-zero validation runs at batches_trained 0 with no earlier one."""
    _, _, log = run_local(step_zero_validation=True, validation_period=Batch(5))
    assert _validated_at(log) == [0, 5, 10]
    _, _, log = run_local(validation_period=Batch(5))
    assert _validated_at(log) == [5, 10]


def test_test_mode_runs_one_batch_one_validation_batch_one_checkpoint() -> None:
    """§19 item 55: test_mode trains 1 batch, validates 1 batch, checkpoints once."""
    trial, cap, log = run_local(test_mode=True, max_length=Batch(1000), checkpoint_policy="none")
    assert trial.events == [(0, 0)]
    assert [e for e in log if e[0] == "on_validation_epoch_end"] == [("on_validation_epoch_end", 1)]
    assert len(cap.uuids) == 1


def test_callback_order() -> None:
    """§19 item 64 (§15): hooks run in the reference order; shutdown last."""
    _, _, log = run_local(max_length=Batch(10), validation_period=Batch(10), hparams={"n": 40})
    names = [e[0] for e in log]
    assert names[:3] == ["on_trial_startup", "on_training_start", "on_training_epoch_start"]
    tail = names[names.index("on_training_epoch_end") :]
    assert tail == [
        "on_training_epoch_end",
        "on_training_workload_end",
        "on_validation_start",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_validation_end",
        "state_dict",
        "on_checkpoint_save_start",
        "on_checkpoint_end",
        "on_checkpoint_write_end",
        "on_checkpoint_upload_end",
        "on_trial_shutdown",
    ]


class FailingTrial(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if batch_idx == 2:
            raise ZeroDivisionError("boom")
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_shutdown_runs_even_on_error() -> None:
    """§19 item 64: on_trial_shutdown runs when training raises."""
    log: list[Any] = []
    with pytest.raises(ZeroDivisionError), det_torch.init(hparams={"callback_log": log}) as ctx:
        det_torch.Trainer(FailingTrial(ctx), ctx).fit(max_length=Batch(5))
    assert log[-1] == ("on_trial_shutdown",)


class StopTrial(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if batch_idx == 4:
            self.context.set_stop_requested(True)
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_stop_requested_checkpoints_and_returns_at_next_boundary() -> None:
    """§19 item 63: set_stop_requested -> checkpoint at the next boundary, clean return, no
    more batches."""
    trial, cap, log = run_local(StopTrial, reporting_period=Batch(3), checkpoint_policy="none")
    assert trial.reason == det_torch.ExitReason.STOPPED
    assert [i for _, i in trial.events] == [0, 1, 2, 3, 4, 5]
    assert _checkpointed_at(log) == [6]


class InvalidHPTrial(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        out = super().train_batch(batch, epoch_idx, batch_idx)
        if batch_idx == 2:
            raise det.InvalidHP("too big")
        return out


def test_invalid_hp_checkpoints_and_exits_zero() -> None:
    """§19 item 66: InvalidHP in train_batch -> a checkpoint, early exit, exit status 0."""
    log: list[Any] = []
    with pytest.raises(SystemExit) as exc, det_torch.init(hparams={"callback_log": log}) as ctx:
        det_torch.Trainer(InvalidHPTrial(ctx), ctx).fit(max_length=Batch(5))
    assert exc.value.code == 0
    assert [e[0] for e in log][-2:] == ["on_checkpoint_upload_end", "on_trial_shutdown"]


class EveryBatchLR(MLPTrial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        mode = context.get_hparam("mode")
        self.sched = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.5),
            step_mode=getattr(det_torch.LRScheduler.StepMode, mode),
            frequency=context.get_hparam("freq"),
        )


@pytest.mark.parametrize(
    ("mode", "freq", "steps"),
    [("STEP_EVERY_BATCH", 2, 5), ("STEP_EVERY_EPOCH", 1, 2), ("MANUAL_STEP", 1, 0)],
)
def test_lr_auto_step(mode: str, freq: int, steps: int) -> None:
    """§19 item 62: EVERY_BATCH freq 2 steps every 2 batches; EVERY_EPOCH at each epoch end."""
    trial, _, _ = run_local(EveryBatchLR, hparams={"mode": mode, "freq": freq, "n": 20})
    assert trial.sched.last_epoch == steps


def test_metrics_are_written_to_tensorboard_unless_disabled() -> None:
    """Deviation (docs/pytorch.md): core writes TensorBoard events in AUTO mode, so a local
    run leaves tfevents with Determined/ tags; enable_tensorboard_logging=False writes none."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from determined.common import _paths

    run_local(validation_period=Batch(5))
    # One run's directory; its writer starts a new file each wall-clock second it writes in.
    files = sorted(_paths.default_tensorboard_dir().rglob("*tfevents*"))
    assert files and len({f.parent for f in files}) == 1, files
    acc = EventAccumulator(str(files[0].parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"Determined/loss", "Determined/val_loss"} <= tags
    assert not any("val_val" in t for t in tags)
    with det_torch.init(hparams={}, enable_tensorboard_logging=False) as ctx:
        trial = MLPTrial(ctx)
        assert ctx.get_enable_tensorboard_logging() is False
        det_torch.Trainer(trial, ctx).fit(max_length=Batch(2))
    assert sorted(_paths.default_tensorboard_dir().rglob("*tfevents*")) == files


def test_progress_bar_counts_batches(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue item 8: interactive local runs show a tqdm bar (batches, updated per chunk)."""
    from determined.pytorch._controller import Controller, LoopSettings
    from determined.pytorch._periods import Periods

    with det_torch.init(hparams={}) as ctx:
        trial = MLPTrial(ctx)
        settings = LoopSettings(
            periods=Periods(reporting=Batch(5)), max_length=Batch(10), progress_bar=True
        )
        Controller(trial, ctx, settings).run()
    err = capsys.readouterr().err
    assert "10/10" in err


def test_local_fit_needs_an_int_max_length() -> None:
    """§19 item 42: local fit without max_length raises ValueError; a non-int value TypeError;
    a bad policy ValueError."""
    with det_torch.init(hparams={}) as ctx:
        trainer = det_torch.Trainer(MLPTrial(ctx), ctx)
        with pytest.raises(ValueError, match="max_length"):
            trainer.fit()
        with pytest.raises(TypeError):
            trainer.fit(max_length=Batch({1, 2}))
        with pytest.raises(ValueError, match="checkpoint_policy"):
            trainer.fit(max_length=Batch(1), checkpoint_policy="most")


class SigtermTrial(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if batch_idx == 3:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGTERM)  # local preemption signal (core)
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_local_sigterm_preempts_at_the_next_boundary() -> None:
    """§19 item 63: preemption (SIGTERM locally) -> checkpoint at the next boundary, clean
    return, no more batches."""
    trial, cap, log = run_local(SigtermTrial, reporting_period=Batch(5), max_length=Batch(20))
    assert trial.reason == det_torch.ExitReason.STOPPED
    assert [i for _, i in trial.events] == [0, 1, 2, 3, 4]
    assert _checkpointed_at(log) == [5]


class OldHook(det_torch.PyTorchCallback):
    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        pass


class OldHookTrial(MLPTrial):
    def build_callbacks(self) -> dict[str, det_torch.PyTorchCallback]:
        return {"old": OldHook()}


def test_on_checkpoint_end_is_deprecated() -> None:
    """§15: overriding on_checkpoint_end warns (FutureWarning) but still runs."""
    with pytest.warns(FutureWarning, match="on_checkpoint_write_end"):
        run_local(OldHookTrial, max_length=Batch(1))


class ChangingKeys(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        loss = super().train_batch(batch, epoch_idx, batch_idx)
        return {"loss": loss} if batch_idx else {"other": loss}


def test_training_metric_keys_must_match_across_batches() -> None:
    """§12 aggregation: keys must match across batches (ValueError naming them)."""
    with pytest.raises(ValueError, match="same metrics"):
        run_local(ChangingKeys, max_length=Batch(3))


_HOST_READS = {"item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__format__"}


class _Watched(torch.Tensor):
    """A metric tensor that records, for every operation reading it back to the host, how
    many batches had been trained when it happened."""

    reads: list[tuple[str, int]] = []
    trained = 0

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name in _HOST_READS:
            cls.reads.append((name, cls.trained))
        return super().__torch_function__(func, types, args, kwargs or {})


class WatchedMetricsTrial(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        loss = super().train_batch(batch, epoch_idx, batch_idx)
        _Watched.trained = batch_idx + 1
        return {"loss": loss.as_subclass(_Watched), "acc": (loss * 0 + 1).as_subclass(_Watched)}


def test_no_host_sync_per_batch() -> None:
    """Training metrics are read back to the host only at reporting boundaries (every 100
    batches here, and at the end), never per batch: no .item(), .cpu() or .tolist() while
    the chunk trains."""
    _Watched.reads = []
    _, cap, _ = run_local(
        WatchedMetricsTrial, hparams={"n": 40, "batch_size": 4}, max_length=Batch(250)
    )
    assert [len(b) for _, b in cap.training] == [100, 100, 50]
    assert _Watched.reads, "the test's tensors were never read: the watch is broken"
    assert {trained for _, trained in _Watched.reads} == {100, 200, 250}
