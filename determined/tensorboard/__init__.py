"""TensorBoard support: the AUTO-mode metric writer, and syncing a trial's TensorBoard files
to storage. See ``docs/core/tensorboard.md``."""

from determined.tensorboard import util
from determined.tensorboard._manager import (
    DirectoryTensorboardStorage,
    Mangler,
    Selector,
    TensorboardManager,
    TensorboardStorage,
)
from determined.tensorboard._paths import (
    get_base_path,
    get_experiment_sync_path,
    get_sync_path,
    local_base_path,
)
from determined.tensorboard._writer import (
    BatchMetricWriter,
    EventWriter,
    MetricWriter,
    get_metric_writer,
    is_numerical_scalar,
    validation_tag_name,
)

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
