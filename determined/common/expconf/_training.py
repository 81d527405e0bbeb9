"""Sections the harness reads while training: ``optimizations``, ``profiling`` and
``reproducibility``. The harness indexes these without fallbacks, so every field is filled."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from determined.common.expconf._base import Section

_UINT32 = 2**32 - 1


class OptimizationsConfig(Section):
    """``optimizations``: gradient aggregation and the legacy Horovod/AMP knobs."""

    aggregation_frequency: int = Field(default=1, ge=1)
    average_aggregated_gradients: bool = True
    average_training_metrics: bool = True
    gradient_compression: bool = False
    grad_updates_size_file: str | None = None
    mixed_precision: Literal["O0", "O1", "O2", "O3"] = "O0"
    tensor_fusion_threshold: int = Field(default=64, ge=0)
    tensor_fusion_cycle_time: int = Field(default=1, ge=0)
    auto_tune_tensor_fusion: bool = False
    # Not in 0.37: PyTorchTrial stages checkpoints to host memory and writes them in the
    # background (docs/pytorch.md, "Asynchronous checkpoints"). Left out of the filled config
    # when not given, so that it stays the reference's.
    async_checkpoints: bool | None = None

    @model_serializer(mode="wrap")
    def _without_unset_extensions(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("async_checkpoints") is None:
            data.pop("async_checkpoints", None)
        return data


class ProfilingConfig(Section):
    """``profiling``: the system-metrics profiler window, in batches."""

    enabled: bool = False
    begin_on_batch: int = Field(default=0, ge=0)
    end_after_batch: int | None = Field(default=None, ge=0)
    sync_timings: bool = True

    @model_validator(mode="after")
    def _window(self) -> ProfilingConfig:
        end = self.end_after_batch
        if end is not None and end < self.begin_on_batch:
            raise ValueError(
                f"end_after_batch ({end}) must not be less than begin_on_batch "
                f"({self.begin_on_batch})"
            )
        return self


def default_seed() -> int:
    """The seed the reference fills in when none is given: the current Unix time (uint32)."""
    return int(time.time()) & _UINT32


class ReproducibilityConfig(Section):
    """``reproducibility``: ``experiment_seed`` (uint32) drives every searcher decision and
    each trial's seed. Filled once, at parse time, when absent."""

    experiment_seed: int = Field(default_factory=default_seed, ge=0, le=_UINT32)
