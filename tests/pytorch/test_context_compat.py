"""The PyTorchTrialContext and Trainer methods 0.37 has that a migrating trial calls
(issue #12 item 2; their names and signatures are pinned by tests/test_public_surface.py)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import torch
from _kit.pytorch_trials import MLPTrial, run_local

import determined.pytorch as det_torch
from determined import errors
from determined.pytorch import Batch


def test_tensorboard_path_and_the_logging_switch() -> None:
    with det_torch.init() as ctx:
        path = ctx.get_tensorboard_path()
        assert isinstance(path, pathlib.Path) and path.is_absolute()
        assert ctx.get_enable_tensorboard_logging() is True
        ctx.set_enable_tensorboard_logging(False)
        assert ctx.get_enable_tensorboard_logging() is False
        with pytest.raises(AssertionError, match="must be a boolean"):
            ctx.set_enable_tensorboard_logging("no")  # type: ignore[arg-type]


def test_autocast_forward_pass_runs_the_forward_in_autocast_and_returns_float32() -> None:
    with det_torch.init() as ctx:
        model = ctx.wrap_model(torch.nn.Linear(4, 2))
        x = torch.randn(3, 4)
        full = model(x)
        expected = torch.nn.functional.linear(
            x.bfloat16(), model.weight.bfloat16(), model.bias.bfloat16()
        ).float()
        same = ctx.autocast_forward_pass(model)
        out = same(x)
        assert same is model
        assert out.dtype == torch.float32  # hands the loss float32
        assert torch.equal(out, expected)  # computed in bf16: under autocast
        assert not torch.equal(out, full)


def test_configure_apex_amp_names_native_amp() -> None:
    with det_torch.init() as ctx:
        model = ctx.wrap_model(torch.nn.Linear(2, 1))
        opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        with pytest.raises(errors.InvalidExperimentException, match="experimental.use_amp"):
            ctx.configure_apex_amp(model, opt, opt_level="O2")


def test_reduce_metrics_and_reset_reducers() -> None:
    with det_torch.init() as ctx:
        total = ctx.wrap_reducer(sum, name="total", for_validation=False)
        pairs = ctx.wrap_reducer(lambda xs: {"n": len(xs)}, for_training=False)
        for v in (1, 2, 3):
            total.update(v)
            pairs.update(v)
        assert ctx.reduce_metrics(for_training=True) == {"total": 6}
        assert ctx.reduce_metrics(for_training=False) == {"n": 3}
        ctx.reset_reducers()
        assert ctx.reduce_metrics(for_training=True) == {"total": 0}


def test_experimental_context_is_public() -> None:
    with det_torch.init() as ctx:
        assert isinstance(ctx.experimental, det_torch.PyTorchExperimentalContext)


def test_configure_profiler_is_a_deprecated_no_op_as_in_0_37() -> None:
    log: list[Any] = []
    with det_torch.init(hparams={"callback_log": log}) as ctx:
        trial = MLPTrial(ctx)
        trainer = det_torch.Trainer(trial, ctx)
        with pytest.warns(FutureWarning, match="profiling_enabled=True"):
            trainer.configure_profiler(enabled=True, begin_on_batch=0, end_after_batch=2)
        trainer.fit(max_length=Batch(2))
    assert trial.events == [(0, 0), (0, 1)]


def test_a_trial_still_trains_with_tensorboard_logging_switched_off() -> None:
    class Quiet(MLPTrial):
        def __init__(self, context: det_torch.PyTorchTrialContext) -> None:
            super().__init__(context)
            context.set_enable_tensorboard_logging(False)

    trial, capture, _ = run_local(Quiet, max_length=Batch(4))
    assert len(trial.events) == 4 and capture.validation
