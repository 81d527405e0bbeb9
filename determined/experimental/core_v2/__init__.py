"""``determined.experimental.core_v2``: the Core API as module-level singletons, for scripts
that run anywhere (0.37's unmanaged experiments; docs/core_v2.md).

    from determined.experimental import core_v2

    core_v2.init(config=core_v2.Config(name="my-run", external_experiment_id="run-1",
                                       external_trial_id="run-1"))
    core_v2.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
    core_v2.close()

``train``, ``checkpoint``, ``distributed``, ``preempt``, ``searcher`` and ``info`` are None
until :func:`init` and again after :func:`close`.
"""

from __future__ import annotations

import determined as det
from determined import core
from determined.core import DistributedContext, PreemptMode, TensorboardMode
from determined.experimental.core_v2._config import Config, DefaultConfig, UnmanagedConfig
from determined.experimental.core_v2._core_v2 import (
    close,
    init,
    init_context,
    url_reverse_webui_exp_view,
)

# The singletons init() sets and close() clears.
train: core.TrainContext | None = None
distributed: core.DistributedContext | None = None
preempt: core.PreemptContext | None = None
checkpoint: core.CheckpointContext | None = None
searcher: core.SearcherContext | None = None
info: det.ClusterInfo | None = None

__all__ = [
    "Config",
    "DefaultConfig",
    "DistributedContext",
    "PreemptMode",
    "TensorboardMode",
    "UnmanagedConfig",
    "checkpoint",
    "close",
    "distributed",
    "info",
    "init",
    "init_context",
    "preempt",
    "searcher",
    "train",
    "url_reverse_webui_exp_view",
]
