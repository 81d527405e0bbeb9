"""TensorBoard support: the AUTO-mode metric writer, and syncing a trial's TensorBoard files
to storage. See ``docs/core/tensorboard.md``."""

import importlib
from typing import TYPE_CHECKING, Any

from determined.tensorboard import util
from determined.tensorboard._paths import (
    get_base_path,
    get_experiment_sync_path,
    get_sync_path,
    local_base_path,
)

# The writer and the sync manager (numpy) load on first use: the CLI and the master need only
# the paths.
_MANAGER = (
    "DirectoryTensorboardStorage",
    "Mangler",
    "Selector",
    "TensorboardManager",
    "TensorboardStorage",
)
_WRITER = (
    "BatchMetricWriter",
    "EventWriter",
    "MetricWriter",
    "get_metric_writer",
    "is_numerical_scalar",
    "validation_tag_name",
)
_LAZY = {
    **dict.fromkeys(_MANAGER, "determined.tensorboard._manager"),
    **dict.fromkeys(_WRITER, "determined.tensorboard._writer"),
}

if TYPE_CHECKING:
    from determined.tensorboard._manager import (
        DirectoryTensorboardStorage,
        Mangler,
        Selector,
        TensorboardManager,
        TensorboardStorage,
    )
    from determined.tensorboard._writer import (
        BatchMetricWriter,
        EventWriter,
        MetricWriter,
        get_metric_writer,
        is_numerical_scalar,
        validation_tag_name,
    )


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'determined.tensorboard' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BatchMetricWriter",
    "DirectoryTensorboardStorage",
    "EventWriter",
    "Mangler",
    "MetricWriter",
    "Selector",
    "TensorboardManager",
    "TensorboardStorage",
    "get_base_path",
    "get_experiment_sync_path",
    "get_metric_writer",
    "get_sync_path",
    "is_numerical_scalar",
    "local_base_path",
    "util",
    "validation_tag_name",
]
