"""Model-parallel units: which data-parallel replica a rank belongs to, and whether it builds
data loaders and reports metrics."""

from __future__ import annotations

import dataclasses
from typing import Any

from determined import core


@dataclasses.dataclass
class ModelParallelUnit:
    """The parallel layout of one rank, as ``DeepSpeedTrialController`` reads it.

    ``data_parallel_rank`` / ``data_parallel_world_size`` shard the data loaders;
    ``should_report_metrics`` marks the ranks whose ``train_batch`` / ``evaluate_batch`` results
    count (usually the last pipeline stage); ``should_build_data_loader`` the ranks that read
    data (usually the first and last stage). Subclass or build one for custom model parallelism
    and pass it to ``DeepSpeedTrialContext.set_mpu``.
    """

    data_parallel_rank: int
    data_parallel_world_size: int
    should_report_metrics: bool
    should_build_data_loader: bool


def make_data_parallel_mpu(dist_context: core.DistributedContext) -> ModelParallelUnit:
    """Plain data parallelism: every rank is a replica that reads data and reports metrics."""
    return ModelParallelUnit(
        data_parallel_rank=dist_context.get_rank(),
        data_parallel_world_size=dist_context.get_size(),
        should_report_metrics=True,
        should_build_data_loader=True,
    )


def make_deepspeed_mpu(topology: Any) -> ModelParallelUnit:
    """The unit of a DeepSpeed ``PipelineParallelGrid`` (a ``PipelineEngine``'s ``mpu``): data
    is read by the first slice of the first and last pipeline stages."""
    stage = topology.get_pipe_parallel_rank()
    last_stage = topology.get_pipe_parallel_world_size() - 1
    reads_data = topology.get_slice_parallel_rank() == 0 and stage in (0, last_stage)
    return ModelParallelUnit(
        data_parallel_rank=topology.get_data_parallel_rank(),
        data_parallel_world_size=topology.get_data_parallel_world_size(),
        should_report_metrics=True,
        should_build_data_loader=reads_data,
    )
