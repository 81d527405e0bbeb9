"""Checkpoint storage backends: shared_fs, directory, s3, gcs and azure.

Every backend commits a checkpoint atomically with a manifest (``.det_manifest.json``) of each
file's size and sha256, and verifies it when reading; see ``docs/core/checkpoints.md``.
"""

from determined.common.storage._azure import AzureStorageManager
from determined.common.storage._base import Selector, StorageManager
from determined.common.storage._build import build, from_init_arg, from_string, shared_fs_base
from determined.common.storage._cloud import MARKER_NAME, CloudStorageManager, ObjectStore
from determined.common.storage._directory import DirectoryStorageManager, SharedFSStorageManager
from determined.common.storage._gcs import GCSStorageManager
from determined.common.storage._manifest import MANIFEST_NAME, FileEntry, Manifest
from determined.common.storage._s3 import S3StorageManager

__all__ = [
    "MANIFEST_NAME",
    "MARKER_NAME",
    "AzureStorageManager",
    "CloudStorageManager",
    "DirectoryStorageManager",
    "FileEntry",
    "GCSStorageManager",
    "Manifest",
    "ObjectStore",
    "S3StorageManager",
    "Selector",
    "SharedFSStorageManager",
    "StorageManager",
    "build",
    "from_init_arg",
    "from_string",
    "shared_fs_base",
]
