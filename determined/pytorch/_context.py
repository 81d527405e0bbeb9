"""``PyTorchTrialContext``: what a ``PyTorchTrial`` uses to register its models, optimizers and
schedulers and to read its configuration. Optimizer stepping lives in ``_optimization.py``."""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
from collections.abc import Callable
from typing import Any

import torch

from determined import core, errors
from determined.pytorch import _to_device
from determined.pytorch._lr_scheduler import LRScheduler
from determined.pytorch._optimization import _Optimization
from determined.pytorch._reducer import (
    MetricReducer,
    _cross_slot_reduce,
    _wrap_reducer,
    _WrappedReducer,
)

logger = logging.getLogger("determined.pytorch")


@dataclasses.dataclass(frozen=True)
class _TrainingSetup:
    """What the training loop reads from the context: resolved once, after the trial's
    ``__init__`` has wrapped everything (the lists are the context's own)."""

    core: core.Context
    models: list[torch.nn.Module]
    optimizers: list[torch.optim.Optimizer]
    lr_schedulers: list[LRScheduler]
    reducers: list[_WrappedReducer]
    scaler: Any
    auto_amp: bool
    auto_to_device: bool
    data_repro_checks: bool
    aggregation_frequency: int
    to_device: Callable[[Any], Any]
    profiler: Any  # a torch.profiler.profile from set_profiler(), or None


def is_fsdp(model: torch.nn.Module) -> bool:
    """Whether ``model`` was sharded with ``torch.distributed.fsdp.fully_shard`` (FSDP2).
    False on torch builds without torch.distributed."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return isinstance(model, FSDPModule)


def _pick_device(dist: core.DistributedContext) -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    if dist.get_size() > 1:
        torch.cuda.set_device(dist.get_local_rank())
        return torch.device("cuda", dist.get_local_rank())
    return torch.device("cuda", 0)


def _batch_sizes(hparams: dict[str, Any] | None, slots: int) -> tuple[int, int] | None:
    gbs = (hparams or {}).get("global_batch_size")
    if not gbs:
        return None
    if not isinstance(gbs, int) or isinstance(gbs, bool):
        raise errors.InvalidExperimentException(
            f"hyperparameters.global_batch_size is {gbs!r}, but must be an int"
        )
    if gbs < slots:
        raise errors.InvalidExperimentException(
            f"global_batch_size {gbs} is smaller than the {slots} slots: raise it to >= {slots}"
        )
    per_slot = gbs // slots
    if per_slot * slots != gbs:
        logger.warning(
            f"global_batch_size {gbs} is not divisible by {slots} slots; using "
            f"{per_slot * slots} ({per_slot} per slot)"
        )
    return per_slot, per_slot * slots


class PyTorchExperimentalContext:
    """``context.experimental``: switches that change how the loop treats the trial."""

    def __init__(self, parent: PyTorchTrialContext) -> None:
        self._context = parent

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow plain torch loaders (no repeat, shard or skip on resume)."""
        self._context._data_repro_checks = False

    def disable_auto_to_device(self) -> None:
        """Pass batches to ``train_batch``/``evaluate_batch`` without moving them."""
        self._context._auto_to_device = False

    def use_amp(self) -> None:
        """Automatic mixed precision: autocast around ``train_batch`` plus a GradScaler."""
        self._context.wrap_scaler(torch.amp.GradScaler(self._context.device.type))
        self._context._auto_amp = True


def _float32(output: Any) -> Any:
    """float16 tensors in ``output`` (a tensor, or dicts/lists/tuples of them) as float32."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
    if isinstance(output, dict):
        return {k: _float32(v) for k, v in output.items()}
    if isinstance(output, (list, tuple)):
        return type(output)(_float32(v) for v in output)
    return output


class PassThroughDDP(torch.nn.parallel.DistributedDataParallel):
    """DistributedDataParallel whose missing attributes are looked up on the wrapped module, so
    trial code written for one slot (``self.model.weight``, ``self.model.my_method()``) runs
    unchanged on several (0.37's wrapper does the same)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


class PyTorchTrialContext:
    """Built by ``det.pytorch.init()``; handed to the trial's ``__init__``.

    Register every model, optimizer and scheduler through the ``wrap_*`` methods so the loop
    can move, distribute, step and checkpoint them. Accessors raise ValueError when the value
    was never configured (``get_hparams`` in a local run without ``hparams``).
    """

    def __init__(
        self,
        core_context: core.Context,
        *,
        hparams: dict[str, Any] | None = None,
        exp_conf: dict[str, Any] | None = None,
        trial_seed: int | None = None,
        aggregation_frequency: int = 1,
        average_aggregated_gradients: bool = True,
        steps_completed: int = 0,
        managed_training: bool = True,
        enable_tensorboard_logging: bool = True,
    ) -> None:
        self._core = core_context
        self.distributed = core_context.distributed
        self._hparams = hparams
        self._exp_conf = exp_conf
        self._trial_seed = trial_seed
        self._steps_completed = steps_completed
        self._managed = managed_training
        self._tb_logging = enable_tensorboard_logging
        self.device = _pick_device(self.distributed) if managed_training else torch.device("cpu")
        self._sizes = _batch_sizes(hparams, self.distributed.get_size())
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self._reducers: list[_WrappedReducer] = []
        self._opt = _Optimization(
            aggregation_frequency, average_aggregated_gradients, managed_training
        )
        self._data_repro_checks = True
        self._auto_to_device = True
        self._auto_amp = False
        self._stop_requested = False
        self._warned_types: set[type] = set()
        self._tb_writer: Any = None
        self._profiler: Any = None
        self._epoch_len: int | None = None
        self.experimental = PyTorchExperimentalContext(self)

    # ---- configuration -------------------------------------------------------------------------

    def get_hparams(self) -> dict[str, Any]:
        if self._hparams is None:
            raise ValueError("no hyperparameters: pass hparams= to det.pytorch.init()")
        return self._hparams

    def get_hparam(self, name: str) -> Any:
        hparams = self.get_hparams()
        if name not in hparams:
            raise ValueError(f"no hyperparameter {name!r}; configured: {sorted(hparams)}")
        return hparams[name]

    def get_experiment_config(self) -> dict[str, Any]:
        if self._exp_conf is None:
            raise ValueError("no experiment config: pass exp_conf= to det.pytorch.init()")
        return self._exp_conf

    def get_data_config(self) -> dict[str, Any]:
        return dict((self._exp_conf or {}).get("data", {}))

    def get_trial_seed(self) -> int:
        if self._trial_seed is None:
            raise errors.InternalException("there is no trial seed in a local run")
        return self._trial_seed

    def get_per_slot_batch_size(self) -> int:
        return self._batch_size()[0]

    def get_global_batch_size(self) -> int:
        return self._batch_size()[1]

    def _batch_size(self) -> tuple[int, int]:
        if self._sizes is None:
            raise ValueError("batch sizes need a truthy hyperparameter global_batch_size")
        return self._sizes

    def get_initial_batch(self) -> int:
        return self._steps_completed

    def get_experiment_id(self) -> int:
        if self._core.info is None or self._core.info.task_type != "TRIAL":
            raise AttributeError("a local run has no experiment id")
        return int(self._core.info.trial.experiment_id)

    def get_trial_id(self) -> int:
        if self._core.info is None or self._core.info.task_type != "TRIAL":
            raise AttributeError("a local run has no trial id")
        return int(self._core.info.trial.trial_id)

    def get_enable_tensorboard_logging(self) -> bool:
        return self._tb_logging

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        """Whether the loop writes reported metrics to TensorBoard (as ``pytorch.init``'s
        ``enable_tensorboard_logging``)."""
        if not isinstance(enable_tensorboard_logging, bool):
            raise AssertionError("enable_tensorboard_logging must be a boolean")
        self._tb_logging = enable_tensorboard_logging

    def get_tensorboard_path(self) -> pathlib.Path:
        """The directory for TensorBoard files (the trial's; ``./runs`` without a master)."""
        path = self._core.train.get_tensorboard_path()
        return path if path is not None else pathlib.Path("runs").absolute()

    # ---- registration --------------------------------------------------------------------------

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to the device and, with several ranks under torch.distributed
        (``USE_TORCH_DISTRIBUTED`` set), wrap it in DistributedDataParallel whose attribute
        lookups fall through to the model (``self.model.weight``, the model's own methods), as
        in 0.37. Call on every rank in the same order.

        A model already sharded with ``torch.distributed.fsdp.fully_shard`` (FSDP2) is
        registered as it is (no DDP): build its optimizer from the sharded parameters, and
        checkpoints save weights and optimizer state with torch.distributed.checkpoint, one
        file per rank (docs/pytorch.md, "FSDP2")."""
        if not self._managed:
            return model
        if is_fsdp(model):
            self.models.append(model)
            return model
        model = model.to(self.device)
        if self.distributed.get_size() > 1 and os.environ.get("USE_TORCH_DISTRIBUTED"):
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = PassThroughDDP(model, device_ids=ids)
        self.models.append(model)
        return model

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        backward_passes_per_step: int = 1,
        fp16_compression: bool | None = None,
        average_aggregated_gradients: bool | None = None,
    ) -> torch.optim.Optimizer:
        """Register ``optimizer`` (returned unchanged) so it is checkpointed and stepped
        through :meth:`step_optimizer`. ``fp16_compression`` and ``backward_passes_per_step``
        only matter to Horovod, which is not supported; ``average_aggregated_gradients``
        overrides ``optimizations.average_aggregated_gradients``."""
        if backward_passes_per_step < 1:
            raise errors.InvalidExperimentException(
                f"backward_passes_per_step is {backward_passes_per_step}, but must be >= 1"
            )
        if average_aggregated_gradients is not None:
            self._opt.average = average_aggregated_gradients
        if self._managed:
            self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self,
        lr_scheduler: Any,
        step_mode: LRScheduler.StepMode,
        frequency: int = 1,
    ) -> Any:
        """Register a scheduler the loop steps per ``step_mode``; returns it unchanged."""
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(f"step_mode must be LRScheduler.StepMode, not {step_mode!r}")
        plateau = isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        if plateau and step_mode != LRScheduler.StepMode.MANUAL_STEP:
            raise errors.InvalidExperimentException(
                "ReduceLROnPlateau needs a metric, so wrap it with StepMode.MANUAL_STEP and "
                "call step(metric) yourself"
            )
        if not any(lr_scheduler.optimizer is o for o in self.optimizers):
            raise errors.InvalidExperimentException(
                "the scheduler's optimizer was not wrapped: call wrap_optimizer() on it first"
            )
        if self._managed:
            self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler: torch.amp.GradScaler) -> torch.amp.GradScaler:
        """Register a GradScaler (checkpointed, updated after communicating batches). Must
        come before :meth:`wrap_model`."""
        if self.models:
            raise errors.InvalidExperimentException(
                "wrap_scaler() (and experimental.use_amp()) must be called before wrap_model()"
            )
        if self._opt.scaler is not None:
            raise errors.InvalidExperimentException("a scaler is already wrapped")
        self._opt.scaler = scaler
        return scaler

    def autocast(self, dtype: torch.dtype | None = None, enabled: bool = True) -> torch.autocast:
        """``torch.autocast`` for this context's device (bf16 on CPU by default)."""
        if dtype is None and self.device.type == "cpu":
            dtype = torch.bfloat16
        return torch.autocast(self.device.type, dtype=dtype, enabled=enabled)

    def autocast_forward_pass(self, to_wrap: torch.nn.Module) -> torch.nn.Module:
        """``to_wrap`` with its forward pass under :meth:`autocast` and float16 outputs turned
        back into float32 (so losses need no autocast), as 0.37's deprecated helper; prefer
        ``experimental.use_amp()`` or ``with context.autocast():``."""
        context = self

        def forward(*args: Any, **kwargs: Any) -> Any:
            with context.autocast():
                return _float32(original(*args, **kwargs))

        original = to_wrap.forward
        to_wrap.forward = forward
        return to_wrap

    def configure_apex_amp(
        self,
        models: torch.nn.Module | list[torch.nn.Module],
        optimizers: torch.optim.Optimizer | list[torch.optim.Optimizer],
        enabled: bool | None = True,
        opt_level: str | None = "O1",
        cast_model_type: torch.dtype | None = None,
        patch_torch_functions: bool | None = None,
        keep_batchnorm_fp32: bool | str | None = None,
        master_weights: bool | None = None,
        loss_scale: float | str | None = None,
        cast_model_outputs: torch.dtype | None = None,
        num_losses: int | None = 1,
        verbosity: int | None = 1,
        min_loss_scale: float | None = None,
        max_loss_scale: float | None = 2.0**24,
    ) -> tuple[Any, Any]:
        """NVIDIA Apex is not supported (it is unmaintained and does not build against current
        PyTorch): raises with the native-AMP replacement."""
        raise errors.InvalidExperimentException(
            "configure_apex_amp() is not supported: Apex AMP is replaced by PyTorch's native AMP. "
            "Call context.experimental.use_amp() in __init__ (automatic), or "
            "context.wrap_scaler(torch.amp.GradScaler()) with `with context.autocast():` in "
            "train_batch, and pass the scaler to step_optimizer"
        )

    def wrap_reducer(
        self,
        reducer: Callable[[list[Any]], Any] | MetricReducer,
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a custom metric reducer; a plain function ``fn(values)`` becomes a reducer
        with ``update(value)``. Returns the reducer to call ``update`` on."""
        return _wrap_reducer(self._reducers, reducer, name, for_training, for_validation)

    def reset_reducers(self) -> None:
        """Clear every wrapped reducer (the loop does this before each training chunk and each
        validation)."""
        for wrapped in self._reducers:
            wrapped.reducer.reset()

    def reduce_metrics(self, for_training: bool) -> dict[str, Any]:
        """The metrics of the reducers wrapped for training (or validation), reduced across all
        ranks; a collective that every rank calls and every rank gets the result of."""
        selected = [
            w for w in self._reducers if (w.for_training if for_training else w.for_validation)
        ]
        if not selected:
            return {}
        return self.run_cross_slot_reduction(
            selected, self.distributed.allgather([w.reducer.per_slot_reduce() for w in selected])
        )

    def run_cross_slot_reduction(
        self, reducables: list[_WrappedReducer], gathered: list[Any]
    ) -> dict[str, Any]:
        """Cross-rank reduction of ``gathered`` (one list of per-slot results per rank, in the
        order of ``reducables``) into metrics by name."""
        return _cross_slot_reduce(reducables, gathered)

    # ---- training-time helpers -----------------------------------------------------------------

    def backward(
        self,
        loss: torch.Tensor,
        gradient: torch.Tensor | None = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        """``loss.backward()``, scaled under automatic AMP; on batches that do not step the
        optimizer, DDP's gradient all-reduce is skipped (``no_sync``)."""
        self._opt.backward(self.models, loss, gradient, retain_graph, create_graph, self._auto_amp)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Any], None] | None = None,
        auto_zero_grads: bool = True,
        scaler: Any = None,
    ) -> None:
        """Step ``optimizer`` on batches that complete an aggregation window (every batch
        unless ``optimizations.aggregation_frequency`` > 1). See docs/pytorch.md."""
        for wrapped in self.optimizers:  # a loop, not any(genexpr): this runs every batch
            if wrapped is optimizer:
                break
        else:
            raise KeyError(f"optimizer {optimizer!r} was never passed to wrap_optimizer()")
        self._opt.step(optimizer, clip_grads, auto_zero_grads, scaler, self._auto_amp)

    def to_device(self, data: Any) -> Any:
        return _to_device.to_device(data, self.device, self._warned_types)

    def get_tensorboard_writer(self) -> Any:
        """A ``torch.utils.tensorboard.SummaryWriter`` writing into the trial's TensorBoard
        directory (``./runs`` when there is none)."""
        if self._tb_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            path = self._core.train.get_tensorboard_path()
            self._tb_writer = SummaryWriter(str(path) if path is not None else None)
        return self._tb_writer

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Profile training with ``torch.profiler.profile(*args, **kwargs)``: traces are written
        into the trial's TensorBoard directory and the loop calls ``step()`` after each batch."""
        path = self._core.train.get_tensorboard_path()
        handler = torch.profiler.tensorboard_trace_handler(str(path) if path else "./runs")
        self._profiler = torch.profiler.profile(*args, on_trace_ready=handler, **kwargs)

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the loop to checkpoint and stop at the next reporting boundary."""
        if not isinstance(stop_requested, bool):
            raise AssertionError(f"stop_requested must be a bool, not {stop_requested!r}")
        self._stop_requested = stop_requested

    def get_stop_requested(self) -> bool:
        return self._stop_requested

    # ---- the training loop's side ------------------------------------------------------------

    def _training_setup(self) -> _TrainingSetup:
        return _TrainingSetup(
            core=self._core,
            models=self.models,
            optimizers=self.optimizers,
            lr_schedulers=self.lr_schedulers,
            reducers=self._reducers,
            scaler=self._opt.scaler,
            auto_amp=self._auto_amp,
            auto_to_device=self._auto_to_device,
            data_repro_checks=self._data_repro_checks,
            aggregation_frequency=self._opt.agg,
            to_device=_to_device.batch_mover(self.device, self._warned_types),
            profiler=self._profiler,
        )

    def _set_progress(self, batch_idx: int, epoch_len: int) -> None:
        self._opt.batch_idx = batch_idx
        self._epoch_len = epoch_len

    def _progress(self) -> tuple[int, int]:
        if self._opt.batch_idx is None or self._epoch_len is None:
            raise errors.InternalException("training has not started yet")
        return self._opt.batch_idx, self._epoch_len

    def current_train_batch(self) -> int:
        return self._progress()[0]

    def current_train_epoch(self) -> int:
        idx, n = self._progress()
        return idx // n

    def is_epoch_start(self) -> bool:
        idx, n = self._progress()
        return idx % n == 0

    def is_epoch_end(self) -> bool:
        idx, n = self._progress()
        return idx % n == n - 1

    def _should_communicate_and_update(self) -> bool:
        return self._opt.communicates()
