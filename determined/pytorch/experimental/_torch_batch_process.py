"""``torch_batch_process``: run a ``TorchBatchProcessor`` over a dataset sharded across the ranks
of a trial, checkpointing progress so that a restarted or resumed trial skips finished batches.

Checkpoints keep 0.37's format (metadata ``{steps_completed, default_output_uuid}`` and a
``batch_completed.json``), so a job checkpointed by either resumes on the other.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
import warnings
from collections.abc import Sized
from typing import Any

from torch.utils import data

import determined as det
from determined import core
from determined.pytorch._data import DataLoader
from determined.pytorch._trainer import _cluster_distributed, _end_process_group
from determined.pytorch.experimental._batch_context import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
)

logger = logging.getLogger("determined.pytorch")

DEFAULT_BATCH_SIZE = 1


def _validate(
    checkpoint_interval: int,
    dataloader_kwargs: dict[str, Any],
    batch_size: int | None,
    dataset: Any,
) -> None:
    if checkpoint_interval <= 0:
        raise ValueError(
            f"checkpoint_interval must be a positive integer, not {checkpoint_interval}"
        )
    if dataloader_kwargs.get("shuffle"):
        raise ValueError("'shuffle' must be false for accurate sharding and checkpointing")
    for key in ("sampler", "batch_sampler"):
        if key in dataloader_kwargs:
            raise ValueError(
                f"remove {key!r} from dataloader_kwargs: torch_batch_process builds the sampler "
                "that shards the dataset across ranks"
            )
    if batch_size is not None and "batch_size" in dataloader_kwargs:
        raise ValueError("give batch_size either to torch_batch_process or in dataloader_kwargs")
    if not isinstance(dataset, Sized):
        raise TypeError(f"the dataset must implement __len__(); {type(dataset).__name__} does not")


def _iterate_length(max_batches: int | None, per_rank: int) -> int:
    """Batches each rank iterates: ``max_batches`` when it is in (0, per_rank], else all."""
    if max_batches is None:
        return per_rank
    if max_batches <= 0 or max_batches > per_rank:
        warnings.warn(
            f"max_batches {max_batches} is not in [1, {per_rank}] (the batches per rank); "
            "ignoring it and iterating over the whole dataset once",
            stacklevel=3,
        )
        return per_rank
    return max_batches


def _resume_point(ctx: core.Context, info: det.ClusterInfo) -> tuple[int, str]:
    """(batches already done per rank, output uuid): from the trial's latest checkpoint if it
    has one, else (0, a uuid the chief draws). Every rank gets the same answer."""
    if info.latest_checkpoint is None:
        fresh = str(uuid.uuid4()) if ctx.distributed.get_rank() == 0 else None
        return 0, str(ctx.distributed.broadcast(fresh))
    with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:  # every rank calls it
        metadata = json.loads((path / "metadata.json").read_text())
    skip = int(metadata["steps_completed"])
    logger.info(f"resuming batch processing after {skip} batches per rank")
    return skip, str(metadata["default_output_uuid"])


def _checkpoint(ctx: core.Context, steps_completed: int, output_uuid: str) -> None:
    """Record the batches every rank has finished (the minimum). A collective."""
    done = ctx.distributed.gather(steps_completed)
    if done is None:
        return
    steps = min(done)
    metadata = {"steps_completed": steps, "default_output_uuid": output_uuid}
    with ctx.checkpoint.store_path(metadata) as (path, _):
        (path / "batch_completed.json").write_text(json.dumps({"batch_completed": steps}))


def _report_reduced(
    context: TorchBatchProcessorContext, ctx: core.Context, steps_completed: int
) -> None:
    """Reduce the user's metric reducers across ranks; the chief reports them as validation
    metrics. A collective (a no-op without reducers)."""
    if not context._reducers:
        return
    metrics = context.reduce_metrics(for_training=False)
    if ctx.distributed.get_rank() == 0:
        ctx.train.report_validation_metrics(steps_completed, metrics)


def torch_batch_process(
    batch_processor_cls: type[TorchBatchProcessor],
    dataset: data.Dataset,
    batch_size: int | None = None,
    max_batches: int | None = None,
    checkpoint_interval: int = 5,
    dataloader_kwargs: dict[str, Any] | None = None,
    distributed_context: core.DistributedContext | None = None,
) -> None:
    """Process ``dataset`` with ``batch_processor_cls`` on every rank of this trial.

    Rank ``r`` of ``n`` gets the dataset's batches ``r, r+n, r+2n, ...`` (in order, no shuffle)
    and calls ``process_batch(batch, batch_idx)`` with its own count ``batch_idx``. Every
    ``checkpoint_interval`` batches the ranks synchronise: ``on_checkpoint_start()`` runs, the
    chief checkpoints the number of batches all ranks finished and reports progress, and
    preemption is checked (a preempted job returns and resumes from there). A restarted or
    resumed trial skips the checkpointed batches. At the end: a last checkpoint, the reducers'
    metrics, ``on_finish()``, progress 1.0.

    Call it from the trial's entrypoint on every rank (several slots need
    ``determined.launch.torch_distributed``).

    Args:
        batch_processor_cls: your :class:`TorchBatchProcessor` subclass.
        dataset: a map-style dataset with ``__len__``.
        batch_size: items per batch (default 1, or ``dataloader_kwargs["batch_size"]``).
        max_batches: process at most this many batches per rank.
        checkpoint_interval: batches (per rank) between progress checkpoints.
        dataloader_kwargs: more arguments of the DataLoader (``num_workers``, ``collate_fn``,
            ...); not ``shuffle=True``, ``sampler`` or ``batch_sampler``.
        distributed_context: defaults to torch distributed's (``USE_TORCH_DISTRIBUTED``).

    Raises:
        ValueError: a bad argument (see above).
        TypeError: a dataset without ``__len__``.
        RuntimeError: not in a trial on a cluster.
    """
    kwargs = dict(dataloader_kwargs or {})
    _validate(checkpoint_interval, kwargs, batch_size, dataset)
    if batch_size is None:
        batch_size = int(kwargs.pop("batch_size", DEFAULT_BATCH_SIZE))
    info = det.get_cluster_info()
    if info is None or info.task_type != "TRIAL":
        raise RuntimeError("torch_batch_process only runs in a trial on a cluster")
    started_group = False
    if distributed_context is None:
        distributed_context, started_group = _cluster_distributed(info)
    clean = False
    try:
        # WorkersAskChief: every rank stops at the same checkpoint when preempted.
        with core.init(
            distributed=distributed_context, preempt_mode=core.PreemptMode.WorkersAskChief
        ) as ctx:
            _run(
                ctx,
                info,
                batch_processor_cls,
                dataset,
                batch_size,
                max_batches,
                checkpoint_interval,
                kwargs,
            )
        clean = True
    finally:
        if started_group:  # as PyTorchTrial's init does (docs/pytorch.md, FSDP2)
            _end_process_group(clean)


def _run(
    ctx: core.Context,
    info: det.ClusterInfo,
    processor_cls: type[TorchBatchProcessor],
    dataset: Any,
    batch_size: int,
    max_batches: int | None,
    checkpoint_interval: int,
    kwargs: dict[str, Any],
) -> None:
    rank, size = ctx.distributed.get_rank(), ctx.distributed.get_size()
    skip, output_uuid = _resume_point(ctx, info)
    context = TorchBatchProcessorContext(ctx, f"{output_uuid}/rank_{rank}")
    processor = processor_cls(context=context)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, **kwargs)
    batches = iter(loader.get_data_loader(repeat=False, skip=skip, num_replicas=size, rank=rank))
    # Every rank iterates the same number of times (a short rank gets None at the end), so
    # that no rank waits forever at a checkpoint the others never reach.
    total = _iterate_length(max_batches, math.ceil(len(dataset) / batch_size / size))
    checkpointed = skip
    for batch_idx in range(skip, total):
        batch = next(batches, None)
        if batch is not None:
            processor.process_batch(batch=batch, batch_idx=batch_idx)
        steps = batch_idx + 1
        if steps % checkpoint_interval != 0:
            continue
        processor.on_checkpoint_start()
        _checkpoint(ctx, steps, output_uuid)
        checkpointed = steps
        if rank == 0:
            ctx.train.report_progress(steps / total)
        if ctx.preempt.should_preempt():
            _report_reduced(context, ctx, steps)
            return
    if checkpointed < total:
        processor.on_checkpoint_start()
        _checkpoint(ctx, total, output_uuid)
    _report_reduced(context, ctx, total)
    processor.on_finish()
    if rank == 0 and context._use_default_storage:
        where = info.trial._experiment_config().checkpoint_storage.type
        logger.info(f"upload_path() files are under {output_uuid}/ of the {where} storage")
    ctx.distributed.gather(None)  # report completion once every rank is done
    if rank == 0:
        ctx.train.report_progress(1.0)
