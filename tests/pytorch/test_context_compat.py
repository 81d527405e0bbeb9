"""0.37's PyTorchTrialContext, callback and Trainer methods that user code calls: TensorBoard
switches, AMP helpers, reducers, legacy callback signatures, configure_profiler
(docs/reference/harness.md §10, §11; docs/reference/compatibility.md)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from _kit.pytorch_trials import MLPTrial, run_local

import determined.pytorch as det_torch
from determined import errors
from determined.common import _paths
from determined.pytorch import Batch, PyTorchCallback


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
        self.temperature = 2.0

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        y = self.fc(x)
        return {"y": y, "parts": [y, y.sum()]}

    def scaled(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) / self.temperature


def test_autocast_forward_pass_is_a_transparent_view() -> None:
    """autocast_forward_pass: the forward pass runs under autocast (bf16 matmuls on CPU) and
    half outputs come back float32, nested; isinstance, attributes, methods, writes and
    state_dict are the wrapped module's own, as with 0.37's subclassing wrapper."""
    with det_torch.init() as ctx:
        net = Net()
        seen: list[torch.dtype] = []
        net.fc.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
        view = ctx.autocast_forward_pass(net)
        out = view(torch.randn(3, 4))
        assert seen == [torch.bfloat16]  # inside autocast
        assert out["y"].dtype == torch.float32 and out["parts"][1].dtype == torch.float32
        assert isinstance(view, Net) and view.temperature == 2.0
        assert view.scaled(torch.ones(1, 4)).dtype == torch.float32
        view.temperature = 4.0
        assert net.temperature == 4.0
        assert view.state_dict().keys() == net.state_dict().keys() == {"fc.weight", "fc.bias"}
        assert [p is q for p, q in zip(view.parameters(), net.parameters(), strict=True)] == [
            True,
            True,
        ]


def test_configure_apex_amp_names_native_amp() -> None:
    """configure_apex_amp: InvalidExperimentException (0.37's class on a machine without
    Apex/GPUs) naming native AMP; enabled=False returns the arguments unchanged, as in 0.37."""
    with det_torch.init() as ctx:
        model = ctx.wrap_model(torch.nn.Linear(2, 1))
        opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        assert ctx.configure_apex_amp(model, opt, enabled=False) == (model, opt)
        with pytest.raises(errors.InvalidExperimentException, match="use_amp"):
            ctx.configure_apex_amp(model, opt)


def test_set_enable_tensorboard_logging_turns_automatic_metrics_off() -> None:
    """set_enable_tensorboard_logging(False) from the trial's __init__ stops the automatic
    TensorBoard metrics, as init(enable_tensorboard_logging=False) does; a non-bool raises
    AssertionError, as in 0.37. get_tensorboard_path() is core's directory."""

    class Quiet(MLPTrial):
        def __init__(self, context: Any) -> None:
            context.set_enable_tensorboard_logging(False)
            super().__init__(context)

    with det_torch.init(hparams={}) as ctx:
        with pytest.raises(AssertionError):
            ctx.set_enable_tensorboard_logging(1)  # type: ignore[arg-type]
        path = ctx.get_tensorboard_path()
        assert path is not None and path.is_relative_to(_paths.default_tensorboard_dir())
        trial = Quiet(ctx)
        assert ctx.get_enable_tensorboard_logging() is False
        det_torch.Trainer(trial, ctx).fit(max_length=Batch(4), reporting_period=Batch(2))
    assert list(_paths.default_tensorboard_dir().rglob("*tfevents*")) == []
    run_local(max_length=Batch(2))  # the default stays on
    assert len(list(_paths.default_tensorboard_dir().rglob("*tfevents*"))) == 1


def test_reducer_plumbing_is_public() -> None:
    """reset_reducers / reduce_metrics / run_cross_slot_reduction (0.37's reducer context)."""
    with det_torch.init() as ctx:
        total = ctx.wrap_reducer(sum, name="total", for_validation=False)
        both = ctx.wrap_reducer(lambda v: {"n": len(v)})
        total.update(2)
        total.update(3)
        both.update(1)
        assert ctx.reduce_metrics(for_training=True) == {"total": 5, "n": 1}
        assert ctx.reduce_metrics(for_training=False) == {"n": 1}
        ctx.reset_reducers()
        assert ctx.reduce_metrics(for_training=True) == {"total": 0, "n": 0}


class OldStyle(PyTorchCallback):
    """Hooks as written before Determined 0.17.8: no epoch argument."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_training_epoch_start(self) -> None:  # type: ignore[override]
        self.calls.append("train")

    def on_validation_epoch_start(self) -> None:
        self.calls.append("val")


def test_old_callbacks_without_epoch_idx_still_run() -> None:
    """A callback whose on_training_epoch_start takes no epoch_idx is detected by signature
    and called without it at every epoch start, with one FutureWarning, as 0.37 does;
    on_validation_epoch_start() is called without arguments as in 0.37."""
    old = OldStyle()

    class Trial(MLPTrial):
        def build_callbacks(self) -> dict[str, PyTorchCallback]:
            return {"old": old}

    with pytest.warns(FutureWarning, match="on_training_epoch_start"):
        run_local(Trial, hparams={"n": 8}, max_length=Batch(6), validation_period=Batch(4))
    assert old.calls == ["train", "train", "val", "train", "val"]  # epochs of 2 batches


def test_current_style_callbacks_do_not_warn() -> None:
    class New(PyTorchCallback):
        def __init__(self) -> None:
            self.epochs: list[int] = []

        def on_training_epoch_start(self, epoch_idx: int) -> None:
            self.epochs.append(epoch_idx)

    new = New()

    class Trial(MLPTrial):
        def build_callbacks(self) -> dict[str, PyTorchCallback]:
            return {"new": new}

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        run_local(Trial, hparams={"n": 8}, max_length=Batch(4))
    assert new.epochs == [0, 1]


def test_configure_profiler_is_the_deprecated_no_op_of_0_37() -> None:
    """Trainer.configure_profiler(...) keeps 0.37's signature and, as there, only warns that
    fit(profiling_enabled=True) replaced it; training is unaffected."""
    with det_torch.init(hparams={"n": 8}) as ctx:
        trial = MLPTrial(ctx)
        trainer = det_torch.Trainer(trial, ctx)
        with pytest.warns(FutureWarning, match="profiling_enabled"):
            trainer.configure_profiler(sync_timings=False, enabled=True, begin_on_batch=1)
        assert trainer.fit(max_length=Batch(2)) == det_torch.ExitReason.COMPLETED
