"""``determined.experimental.checkpoint``, as 0.37 names it: the checkpoint class and enums."""

from determined.experimental._sdk._checkpoint import Checkpoint, CheckpointTrainingMetadata
from determined.experimental._sdk._enums import (
    CheckpointOrderBy,
    CheckpointSortBy,
    CheckpointState,
    DownloadMode,
)

__all__ = [
    "Checkpoint",
    "CheckpointOrderBy",
    "CheckpointSortBy",
    "CheckpointState",
    "CheckpointTrainingMetadata",
    "DownloadMode",
]
