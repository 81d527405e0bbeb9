"""``DeepSpeedTrialContext``: what a ``DeepSpeedTrial`` registers with the loop (its model
engines, a model-parallel unit, reducers), and ``overwrite_deepspeed_config``."""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Callable
from typing import Any

import deepspeed
import torch

import determined as det
from determined import errors, util
from determined.pytorch import _to_device
from determined.pytorch._reducer import (
    MetricReducer,
    _cross_slot_reduce,
    _wrap_reducer,
    _WrappedReducer,
)
from determined.pytorch.deepspeed import _mpu

logger = logging.getLogger("determined.pytorch")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in the DeepSpeed config")
        out[key] = value
    return out


def overwrite_deepspeed_config(
    base_ds_config: str | dict[str, Any], source_ds_dict: dict[str, Any]
) -> dict[str, Any]:
    """``base_ds_config`` (a dict, or the path of a JSON file) with the leaves of
    ``source_ds_dict`` written over it, recursively: use it to take batch sizes or tuned values
    from the experiment's hyperparameters. Duplicate keys in the file raise ValueError; a base
    of any other type raises TypeError."""
    if isinstance(base_ds_config, (str, pathlib.Path)):
        text = pathlib.Path(base_ds_config).read_text()
        base: dict[str, Any] = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    elif isinstance(base_ds_config, dict):
        base = base_ds_config
    else:
        raise TypeError(
            "Expected string or dict for base_ds_config argument. (got "
            f"{type(base_ds_config).__name__}: pass the path of a DeepSpeed JSON config or a dict)"
        )
    return util.merge_dicts(base, source_ds_dict)


def _pick_device(env: det.EnvContext, dist: det.core.DistributedContext) -> torch.device:
    """The trial's GPU when it has one; the CPU otherwise (DeepSpeed's CPU accelerator with
    gloo: 0.37 refused to run without GPUs)."""
    if not env.container_gpus or not torch.cuda.is_available():
        return torch.device("cpu")
    index = dist.get_local_rank() if dist.get_size() > 1 else 0
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


class DeepSpeedTrialContext(det.TrialContext):
    """The system's side of a ``DeepSpeedTrial``, built by the harness on every rank.

    In ``__init__`` the trial builds its engines with ``deepspeed.initialize`` and registers
    them with :meth:`wrap_model_engine` (the first engine sets the batch sizes the loop uses:
    ``train_micro_batch_size_per_gpu`` and ``gradient_accumulation_steps`` from the DeepSpeed
    config). Optimizers and LR schedulers belong to the engine (the DeepSpeed config or
    ``deepspeed.initialize``), so there is no ``wrap_optimizer`` here, as in 0.37. Optional:
    :meth:`set_mpu` for custom model parallelism, :meth:`disable_auto_grad_accumulation`,
    :meth:`disable_dataset_reproducibility_checks`, :meth:`wrap_reducer`.
    """

    def __init__(self, core_context: det.core.Context, env: det.EnvContext) -> None:
        super().__init__(core_context, env)
        self.device = _pick_device(env, self.distributed)
        self._warned_types: set[type] = set()
        self.models: list[deepspeed.DeepSpeedEngine] = []
        self._mpu = _mpu.make_data_parallel_mpu(self.distributed)
        self._called_set_mpu = False
        self._train_micro_batch_size_per_gpu: int | None = None
        self._num_micro_batches_per_slot: int | None = None
        self._use_pipeline_parallel = False
        self._data_repro_checks_disabled = False
        self._manual_grad_accumulation = False
        self._reducers: list[_WrappedReducer] = []
        self._epoch_len: int | None = None
        self._current_batch_idx: int | None = None
        self.profiler: Any = None
        self._tbd_writer: Any = None
        self._enable_tensorboard_logging = True
        self._average_training_metrics = self._check_optimizations()

    def _check_optimizations(self) -> bool:
        """Refuse the experiment-config optimizations that DeepSpeed configures itself; returns
        ``average_training_metrics``."""
        opts = dict(self.env.experiment_config.get("optimizations") or {})
        if opts.get("mixed_precision", "O0") != "O0":
            raise errors.InvalidExperimentException(
                "optimizations.mixed_precision does not apply to a DeepSpeedTrial: set fp16 or "
                "bf16 in the DeepSpeed config instead, and leave mixed_precision at O0"
            )
        if (opts.get("aggregation_frequency") or 1) > 1:
            raise errors.InvalidExperimentException(
                "optimizations.aggregation_frequency does not apply to a DeepSpeedTrial: set "
                "gradient_accumulation_steps in the DeepSpeed config instead"
            )
        ignored = {
            "average_aggregated_gradients": True,
            "gradient_compression": False,
            "tensor_fusion_threshold": 64,
            "tensor_fusion_cycle_time": 1,
            "auto_tune_tensor_fusion": False,
        }
        for name, default in ignored.items():
            if opts.get(name, default) != default:
                logger.warning(f"optimizations.{name}={opts[name]} is ignored by DeepSpeedTrial")
        return bool(opts.get("average_training_metrics", False))

    # ---- what the trial registers ------------------------------------------------------------

    def wrap_model_engine(self, model: deepspeed.DeepSpeedEngine) -> deepspeed.DeepSpeedEngine:
        """Register a DeepSpeed engine: it is checkpointed and restored with the trial. The
        first one sets the batch sizes and, for a ``PipelineEngine``, the model-parallel
        unit."""
        model = model.to(self.device)
        if isinstance(model, deepspeed.PipelineEngine):
            self._use_pipeline_parallel = True
            if not self.models:
                self._mpu = _mpu.make_deepspeed_mpu(model.mpu)
            else:
                logger.warning("the model-parallel unit of the first wrapped engine is used")
        micro = int(model.train_micro_batch_size_per_gpu())
        if not self.models:
            self._train_micro_batch_size_per_gpu = micro
            self._num_micro_batches_per_slot = int(model.gradient_accumulation_steps())
        elif micro != self._train_micro_batch_size_per_gpu:
            logger.warning(
                f"engine {len(self.models) + 1} has train_micro_batch_size_per_gpu {micro}, "
                f"the first one {self._train_micro_batch_size_per_gpu}: record counts follow "
                "the first engine"
            )
        self.models.append(model)
        return model

    def set_mpu(self, mpu: _mpu.ModelParallelUnit) -> None:
        """Use a custom model-parallel unit (once, after :meth:`wrap_model_engine`)."""
        if not self.models:
            raise errors.InvalidExperimentException(
                "set_mpu() was called before any engine was registered: call "
                "context.wrap_model_engine(engine) first"
            )
        if self._called_set_mpu:
            raise errors.InvalidExperimentException(
                "Only one MPU can be passed to set_mpu(): it was called twice, and a "
                "DeepSpeedTrial has one model-parallel unit"
            )
        if (
            self.distributed.get_rank() == 0
            and not mpu.should_report_metrics
            and not self._average_training_metrics
        ):
            raise errors.InvalidExperimentException(
                "the chief does not report metrics under this model-parallel unit: set "
                "optimizations.average_training_metrics: true in the experiment config so that "
                "the chief receives them"
            )
        self._called_set_mpu = True
        self._mpu = mpu

    def disable_auto_grad_accumulation(self) -> None:
        """Call ``train_batch`` once per batch instead of once per micro batch: the trial then
        trains ``gradient_accumulation_steps`` micro batches itself."""
        self._manual_grad_accumulation = True

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow ``build_*_data_loader`` to return any iterable with a length instead of a
        ``determined.pytorch.DataLoader``; sharding, repeating and resuming it are then the
        trial's job."""
        self._data_repro_checks_disabled = True

    def wrap_reducer(
        self,
        reducer: Callable[[list[Any]], Any] | MetricReducer,
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a custom metric reducer (see ``PyTorchTrialContext.wrap_reducer``)."""
        return _wrap_reducer(self._reducers, reducer, name, for_training, for_validation)

    def reset_reducers(self) -> None:
        for wrapped in self._reducers:
            wrapped.reducer.reset()

    def reduce_metrics(self, for_training: bool) -> dict[str, Any]:
        """The wrapped reducers' metrics across all ranks (a collective)."""
        selected = [
            w for w in self._reducers if (w.for_training if for_training else w.for_validation)
        ]
        if not selected:
            return {}
        gathered = self.distributed.allgather([w.reducer.per_slot_reduce() for w in selected])
        return self.run_cross_slot_reduction(selected, gathered)

    def run_cross_slot_reduction(
        self, reducables: list[_WrappedReducer], gathered: list[Any]
    ) -> dict[str, Any]:
        """Metrics by name from ``gathered`` (per rank, one per-slot result per reducer in
        ``reducables``)."""
        return _cross_slot_reduce(reducables, gathered)

    # ---- what the trial reads ---------------------------------------------------------------

    @property
    def use_pipeline_parallel(self) -> bool:
        return self._use_pipeline_parallel

    @property
    def train_micro_batch_size_per_gpu(self) -> int:
        if self._train_micro_batch_size_per_gpu is None:
            raise errors.InvalidExperimentException(
                "train_micro_batch_size_per_gpu is known once an engine is registered: call "
                "context.wrap_model_engine(engine) first"
            )
        return self._train_micro_batch_size_per_gpu

    @property
    def num_micro_batches_per_slot(self) -> int:
        if self._num_micro_batches_per_slot is None:
            raise errors.InvalidExperimentException(
                "num_micro_batches_per_slot is known once an engine is registered: call "
                "context.wrap_model_engine(engine) first"
            )
        return self._num_micro_batches_per_slot

    def to_device(self, data: Any) -> Any:
        """``data`` (tensors, or containers of them) moved to this rank's device."""
        return _to_device.to_device(data, self.device, self._warned_types)

    def _position(self) -> tuple[int, int]:
        if self._current_batch_idx is None:
            raise errors.InternalException("training has not started: no current batch")
        if self._epoch_len is None:
            raise errors.InternalException("the training data loader is not built yet")
        return self._current_batch_idx, self._epoch_len

    def is_epoch_start(self) -> bool:
        """Whether the current batch is the first of an epoch (fixed-length epochs)."""
        idx, n = self._position()
        return idx % n == 0

    def is_epoch_end(self) -> bool:
        """Whether the current batch is the last of an epoch (fixed-length epochs)."""
        idx, n = self._position()
        return idx % n == n - 1

    def current_train_epoch(self) -> int:
        idx, n = self._position()
        return idx // n

    def current_train_batch(self) -> int:
        """The index of the current batch since the start of training."""
        if self._current_batch_idx is None:
            raise errors.InternalException("training has not started: no current batch")
        return self._current_batch_idx

    # ---- TensorBoard and profiling ----------------------------------------------------------

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Profile training with ``torch.profiler.profile(*args, **kwargs)``, traces written to
        the trial's TensorBoard directory; the loop steps it after each ``train_batch``."""
        handler = torch.profiler.tensorboard_trace_handler(str(self._tb_path()))
        self.profiler = torch.profiler.profile(*args, on_trace_ready=handler, **kwargs)

    def _tb_path(self) -> pathlib.Path:
        path = self._core.train.get_tensorboard_path()
        return path if path is not None else pathlib.Path("runs")

    def get_tensorboard_writer(self) -> Any:
        """A ``torch.utils.tensorboard.SummaryWriter`` into the trial's TensorBoard directory
        (uploaded by the loop after each workload)."""
        if self._tbd_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tbd_writer = SummaryWriter(str(self._tb_path()))
        return self._tbd_writer

    def _maybe_reset_tbd_writer(self) -> None:
        """Flush the writer so the upload after a workload sees every event."""
        if self._tbd_writer is not None:
            self._tbd_writer.flush()

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        """Whether the loop writes training and validation metrics to TensorBoard."""
        if not isinstance(enable_tensorboard_logging, bool):
            raise AssertionError("enable_tensorboard_logging must be a boolean")
        self._enable_tensorboard_logging = enable_tensorboard_logging

    def get_enable_tensorboard_logging(self) -> bool:
        return self._enable_tensorboard_logging
