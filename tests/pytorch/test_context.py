"""PyTorchTrialContext: accessors, batch sizes, wrapping, gradient aggregation
(docs/reference/harness.md §10)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from _kit.pytorch_trials import MLPTrial, params, run_local

import determined.pytorch as det_torch
from determined import core, errors
from determined.pytorch import Batch, PyTorchTrialContext


def _ctx(**kwargs: Any) -> PyTorchTrialContext:
    dist = core.DummyDistributedContext()
    core_ctx = core.init(distributed=dist, tensorboard_mode=core.TensorboardMode.MANUAL)
    return PyTorchTrialContext(core_ctx, **kwargs)


def _multi_slot_ctx(slots: int, **kwargs: Any) -> PyTorchTrialContext:
    # A rank-0 context that believes it has `slots` peers; only its batch-size math is used.
    class Wide(core.DummyDistributedContext):
        def get_size(self) -> int:
            return slots

    core_ctx = core.init(distributed=Wide(), tensorboard_mode=core.TensorboardMode.MANUAL)
    return PyTorchTrialContext(core_ctx, **kwargs)


def test_local_init_has_no_hparams_and_no_seed() -> None:
    """§19 item 35: local init: get_hparams raises ValueError, get_trial_seed InternalException."""
    with det_torch.init() as ctx:
        with pytest.raises(ValueError, match="hparams"):
            ctx.get_hparams()
        with pytest.raises(ValueError):
            ctx.get_hparam("lr")
        with pytest.raises(errors.InternalException):
            ctx.get_trial_seed()
        with pytest.raises(ValueError):
            ctx.get_experiment_config()
        with pytest.raises(AttributeError):
            ctx.get_experiment_id()
        assert ctx.get_data_config() == {}
        assert ctx.get_initial_batch() == 0
        # One process: the first GPU where there is one (as 0.37), else the CPU.
        cuda = torch.cuda.is_available()
        assert ctx.device == (torch.device("cuda", 0) if cuda else torch.device("cpu"))


def test_accessors_with_values() -> None:
    """§10 accessors: hparams, data config, missing hparam names."""
    with det_torch.init(hparams={"lr": 0.5}, exp_conf={"data": {"url": "x"}}) as ctx:
        assert ctx.get_hparam("lr") == 0.5
        with pytest.raises(ValueError, match="momentum"):
            ctx.get_hparam("momentum")
        assert ctx.get_data_config() == {"url": "x"}


def test_batch_sizes() -> None:
    """§19 item 36: gbs 10 over 4 slots -> 2 per slot, 8 global; gbs < slots or non-int: IEE."""
    ctx = _multi_slot_ctx(4, hparams={"global_batch_size": 10})
    assert (ctx.get_per_slot_batch_size(), ctx.get_global_batch_size()) == (2, 8)
    with pytest.raises(errors.InvalidExperimentException):
        _multi_slot_ctx(4, hparams={"global_batch_size": 3})
    with pytest.raises(errors.InvalidExperimentException):
        _multi_slot_ctx(1, hparams={"global_batch_size": 3.5})
    with pytest.raises(ValueError):
        _ctx(hparams={}).get_per_slot_batch_size()


def test_wrap_scaler_after_model_and_scheduler_return() -> None:
    """§19 item 37: wrap_scaler/use_amp after wrap_model raise IEE; wrap_lr_scheduler returns
    the original scheduler."""
    ctx = _ctx()
    model = ctx.wrap_model(torch.nn.Linear(2, 1))
    with pytest.raises(errors.InvalidExperimentException):
        ctx.wrap_scaler(torch.amp.GradScaler("cpu"))
    with pytest.raises(errors.InvalidExperimentException):
        ctx.experimental.use_amp()
    opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    mode = det_torch.LRScheduler.StepMode.STEP_EVERY_BATCH
    assert ctx.wrap_lr_scheduler(sched, mode) is sched
    with pytest.raises(TypeError):
        ctx.wrap_lr_scheduler(sched, "STEP_EVERY_BATCH")  # type: ignore[arg-type]


def test_scheduler_checks() -> None:
    """§19 item 38: ReduceLROnPlateau without MANUAL_STEP, or an unwrapped optimizer: IEE."""
    ctx = _ctx()
    model = ctx.wrap_model(torch.nn.Linear(2, 1))
    opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    mode = det_torch.LRScheduler.StepMode
    with pytest.raises(errors.InvalidExperimentException, match="MANUAL_STEP"):
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        ctx.wrap_lr_scheduler(plateau, mode.STEP_EVERY_EPOCH)
    ctx.wrap_lr_scheduler(torch.optim.lr_scheduler.ReduceLROnPlateau(opt), mode.MANUAL_STEP)
    other = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(errors.InvalidExperimentException, match="wrap_optimizer"):
        ctx.wrap_lr_scheduler(torch.optim.lr_scheduler.StepLR(other, 1), mode.STEP_EVERY_BATCH)


class AggTrial(MLPTrial):
    """Records, per batch, whether the optimizer stepped and the grads clip_grads saw."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.steps: list[int] = []
        self.clipped: list[list[torch.Tensor]] = []
        self.order: list[str] = []
        self.opt.register_step_pre_hook(lambda *a: self.order.append("step"))
        self.opt.register_step_post_hook(lambda *a: self.steps.append(self.batch_idx))

    def _clip(self, params: Any) -> None:
        self.order.append("clip")
        self.clipped.append([p.grad.clone() for p in params])

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.batch_idx = batch_idx
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x).squeeze(-1), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt, clip_grads=self._clip)
        return loss


def test_aggregation_steps_every_n_and_averages() -> None:
    """§19 items 39 and 41: with aggregation 3 the optimizer steps on (idx+1)%3==0; grads are
    divided by 3 before clip_grads, which gets all params."""
    log: list[Any] = []
    hp = {"callback_log": log, "lr": 0.0}  # lr 0: weights stay put, so grads are comparable
    with det_torch.init(hparams=hp, aggregation_frequency=3) as ctx:
        trial = AggTrial(ctx)
        det_torch.Trainer(trial, ctx).fit(max_length=Batch(6))
    assert trial.steps == [2, 5]
    assert trial.order == ["clip", "step", "clip", "step"]  # clipping comes before the step
    assert len(trial.clipped) == 2 and len(trial.clipped[0]) == 4  # every parameter
    # Reference: the mean of the same three batches' gradients, computed by hand.
    model = trial.model
    data = trial.train_set
    device = next(model.parameters()).device  # a GPU where there is one: move the batches too
    model.zero_grad()
    for i in range(3):
        x, y = data.x[i * 4 : i * 4 + 4].to(device), data.y[i * 4 : i * 4 + 4].to(device)
        torch.nn.functional.mse_loss(model(x).squeeze(-1), y).backward()
    expected = [p.grad / 3 for p in model.parameters()]
    for got, want in zip(trial.clipped[0], expected, strict=True):
        torch.testing.assert_close(got, want)


def test_auto_zero_grads_false_with_aggregation_raises() -> None:
    """§19 item 40: auto_zero_grads=False with aggregation > 1 raises IEE."""
    ctx = _ctx(aggregation_frequency=2)
    model = ctx.wrap_model(torch.nn.Linear(2, 1))
    opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ctx._set_progress(1, 10)
    with pytest.raises(errors.InvalidExperimentException, match="auto_zero_grads"):
        ctx.step_optimizer(opt, auto_zero_grads=False)
    with pytest.raises(KeyError):
        ctx.step_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))


def test_progress_queries_before_training_raise() -> None:
    """§10: current_train_batch & co. raise InternalException before training starts."""
    ctx = _ctx()
    for fn in (ctx.current_train_batch, ctx.is_epoch_start, ctx._should_communicate_and_update):
        with pytest.raises(errors.InternalException):
            fn()
    ctx._set_progress(9, 5)
    assert (ctx.current_train_epoch(), ctx.is_epoch_start(), ctx.is_epoch_end()) == (1, False, True)


def test_stop_flag_needs_a_bool() -> None:
    """§10: set_stop_requested with a non-bool raises AssertionError."""
    ctx = _ctx()
    with pytest.raises(AssertionError):
        ctx.set_stop_requested(1)  # type: ignore[arg-type]
    ctx.set_stop_requested(True)
    assert ctx.get_stop_requested()


def test_tensorboard_writer_writes_into_runs_locally(tmp_path: Any) -> None:
    """§10: locally get_tensorboard_writer writes under ./runs."""
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ctx = _ctx()
        writer = ctx.get_tensorboard_writer()
        writer.add_scalar("x", 1.0, 0)
        writer.close()
        assert ctx.get_tensorboard_writer() is writer
    finally:
        os.chdir(cwd)
    assert any((tmp_path / "runs").rglob("*tfevents*"))


class AmpTrial(MLPTrial):
    def __init__(self, context: Any) -> None:
        context.experimental.use_amp()
        super().__init__(context)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.dtypes = getattr(self, "dtypes", [])
        x, _ = batch
        self.dtypes.append(self.model(x).dtype)
        return super().train_batch(batch, epoch_idx, batch_idx)


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="a CPU test: with a GPU the trial trains there, where use_amp autocasts to float16 "
    "(test_use_amp_runs_train_batch_under_fp16_autocast_on_cuda)",
)
def test_use_amp_runs_train_batch_under_bf16_autocast_on_cpu() -> None:
    """§10 AMP: use_amp autocasts train_batch (bf16 on CPU) and scales the loss; training
    still reduces the loss."""
    trial, cap, _ = run_local(AmpTrial, reporting_period=Batch(5))
    assert set(trial.dtypes) == {torch.bfloat16}
    first, last = cap.training[0][0]["loss"], cap.training[-1][0]["loss"]
    assert last < first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_use_amp_runs_train_batch_under_fp16_autocast_on_cuda() -> None:
    """§10 AMP on a GPU: autocast to float16 (torch's CUDA default, as 0.37) with a
    GradScaler; training still reduces the loss."""
    trial, cap, _ = run_local(AmpTrial, reporting_period=Batch(5))
    assert set(trial.dtypes) == {torch.float16}
    assert trial.context._opt.scaler is not None
    first, last = cap.training[0][0]["loss"], cap.training[-1][0]["loss"]
    assert last < first


class ProfiledTrial(MLPTrial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        context.set_profiler(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
        )


def test_set_profiler_writes_a_trace_into_the_tensorboard_dir() -> None:
    """§10 set_profiler: torch profiler traces land in the TensorBoard directory; the loop
    steps the profiler every batch."""
    from determined.common import _paths

    run_local(ProfiledTrial, max_length=Batch(6))
    traces = list(_paths.default_tensorboard_dir().rglob("*.pt.trace.json"))
    assert len(traces) == 1


class ScalerTrial(MLPTrial):
    """The explicit-scaler pattern: wrap_scaler, scale the loss, step through the scaler, and
    call update() in train_batch (the loop updates only automatic-AMP scalers)."""

    def __init__(self, context: Any) -> None:
        self.scaler = context.wrap_scaler(
            torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=1)
        )
        super().__init__(context)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x).squeeze(-1), y)
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.opt, scaler=self.scaler)
        self.scaler.update()
        return loss


def test_explicit_scaler_is_checkpointed_and_restored() -> None:
    """§10 wrap_scaler: the scaler's state is saved as scaler_state_dict and restored on
    resume; training with it matches training without (no overflow, exact unscale)."""
    from _kit.pytorch_trials import ckpt_dir

    trial, cap, _ = run_local(ScalerTrial, max_length=Batch(3))
    state = torch.load(ckpt_dir(cap.uuids[-1]) / "state_dict.pth", weights_only=True)
    assert state["scaler_state_dict"]["scale"] == trial.scaler.get_scale() == 256.0 * 2**3
    resumed, _, _ = run_local(ScalerTrial, max_length=Batch(3), latest_checkpoint=cap.uuids[-1])
    assert resumed.scaler.get_scale() == 256.0 * 2**3  # a fresh scaler starts at 256
    torch.manual_seed(0)
    plain, _, _ = run_local(MLPTrial, max_length=Batch(3))
    torch.manual_seed(0)
    scaled, _, _ = run_local(ScalerTrial, max_length=Batch(3))
    for a, b in zip(params(plain.model), params(scaled.model), strict=True):
        torch.testing.assert_close(a, b)
