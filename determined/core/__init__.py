"""The Core API: metrics, checkpoints, searcher operations, preemption and distributed
collectives, usable with a master or without one. See ``docs/core.md``."""

from determined.core._checkpoint import (
    CheckpointContext,
    DownloadMode,
    DummyCheckpointContext,
)
from determined.core._context import Context, init
from determined.core._distributed import DistributedContext, DummyDistributedContext
from determined.core._experimental import DummyExperimentalCoreContext, ExperimentalCoreContext
from determined.core._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from determined.core._profiler import DummyProfilerContext, ProfilerContext
from determined.core._searcher import (
    DummySearcherContext,
    DummySearcherOperation,
    SearcherContext,
    SearcherMode,
    SearcherOperation,
    Unit,
)
from determined.core._tensorboard_mode import TensorboardMode
from determined.core._train import DummyTrainContext, EarlyExitReason, TrainContext

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyCheckpointContext",
    "DummyDistributedContext",
    "DummyExperimentalCoreContext",
    "DummyPreemptContext",
    "DummyProfilerContext",
    "DummySearcherContext",
    "DummySearcherOperation",
    "DummyTrainContext",
    "EarlyExitReason",
    "ExperimentalCoreContext",
    "PreemptContext",
    "PreemptMode",
    "ProfilerContext",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "init",
]
