"""The data loaders of a ``DeepSpeedTrial`` and the lengths every rank agrees on: the epoch
length in batches, the number of validation batches and their size."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from determined import errors, pytorch
from determined.pytorch._data import _dataset_repro_warning

if TYPE_CHECKING:
    from determined.pytorch.deepspeed._context import DeepSpeedTrialContext
    from determined.pytorch.deepspeed._trial import DeepSpeedTrial

logger = logging.getLogger("determined.pytorch")


@dataclasses.dataclass
class Loaders:
    training: Any
    validation: Any
    num_validation_batches: int
    validation_batch_size: int


def _training_loader(trial: DeepSpeedTrial, ctx: DeepSpeedTrialContext, skip: int) -> Any:
    data = trial.build_training_data_loader()
    mpu = ctx._mpu
    if isinstance(data, pytorch.DataLoader):
        # Repeated (as DeepSpeed's own loaders are), sharded by data-parallel rank, resumed at
        # the batch the checkpoint was taken (in micro batches), and shuffled from (trial seed,
        # epoch) rather than from the global RNG at the first batch, which a restore changes.
        return data.get_data_loader(
            repeat=True,
            skip=skip * ctx.num_micro_batches_per_slot,
            num_replicas=mpu.data_parallel_world_size,
            rank=mpu.data_parallel_rank,
            seed=ctx.env.trial_seed,
        )
    if not ctx._data_repro_checks_disabled:
        raise RuntimeError(
            _dataset_repro_warning("build_training_data_loader", data, is_deepspeed_trial=True)
        )
    logger.warning("a custom training data loader must repeat without end")
    return data


def _validation_loader(trial: DeepSpeedTrial, ctx: DeepSpeedTrialContext) -> Any:
    data = trial.build_validation_data_loader()
    mpu = ctx._mpu
    if isinstance(data, pytorch.DataLoader):
        loader = data.get_data_loader(
            repeat=False,
            skip=0,
            num_replicas=mpu.data_parallel_world_size,
            rank=mpu.data_parallel_rank,
        )
        if ctx.use_pipeline_parallel:
            if len(loader) < ctx.num_micro_batches_per_slot:
                raise errors.InvalidExperimentException(
                    f"the validation data loader has {len(loader)} train micro batches per rank, "
                    "which should not be less than the "
                    f"{ctx.num_micro_batches_per_slot} gradient accumulation steps a pipeline "
                    "engine evaluates at once: give it more data"
                )
            left_out = len(loader) % ctx.num_micro_batches_per_slot
            if left_out:
                logger.warning(f"validation leaves out {left_out} micro batches on this rank")
        return loader
    if not ctx._data_repro_checks_disabled:
        raise RuntimeError(
            _dataset_repro_warning("build_validation_data_loader", data, is_deepspeed_trial=True)
        )
    if ctx.use_pipeline_parallel:
        logger.warning("a custom validation loader's length must divide by the accumulation steps")
    return data


def _length(loader: Any) -> int:
    """``len(loader)``; for DeepSpeed's ``RepeatingLoader`` (no ``__len__``), the length of the
    loader it repeats."""
    try:
        return len(loader)
    except TypeError:
        inner = getattr(loader, "loader", None)
        if inner is None:
            raise
        return len(inner)


def _minimum(values: list[Any], what: str) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if min(present) < max(present):
        logger.warning(f"{what} differs across ranks: using the smallest, {min(present)}")
    return min(present)


def build(trial: DeepSpeedTrial, ctx: DeepSpeedTrialContext, steps_completed: int) -> Loaders:
    """Build the loaders on the ranks that read data (the MPU says which) and agree on the
    lengths across all ranks (collectives: every rank calls this)."""
    training = validation = None
    num_val = val_size = None
    if ctx._mpu.should_build_data_loader:
        training = _training_loader(trial, ctx, steps_completed)
        validation = _validation_loader(trial, ctx)
        num_val = _length(validation)
        val_size = pytorch.data_length(next(iter(validation)))
        if ctx.use_pipeline_parallel:
            num_val //= ctx.num_micro_batches_per_slot
            val_size *= ctx.num_micro_batches_per_slot
    dist = ctx.distributed
    epoch_micro = _length(training) if training is not None else None
    gathered = dist.gather((epoch_micro, num_val, val_size))
    agreed = None
    if gathered is not None:
        lens, nums, sizes = zip(*gathered, strict=True)
        epoch = _minimum(list(lens), "the training data loader's length")
        agreed = (
            max(1, epoch // ctx.num_micro_batches_per_slot) if epoch is not None else None,
            _minimum(list(nums), "the validation data loader's length") or 0,
            _minimum(list(sizes), "the validation batch size") or 0,
        )
    epoch_len, num_val, val_size = dist.broadcast(agreed)
    ctx._epoch_len = epoch_len
    return Loaders(training, validation, num_val, val_size)
