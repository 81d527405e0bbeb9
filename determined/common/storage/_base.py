"""The StorageManager interface: where checkpoints live, and the commit protocol they follow.

A checkpoint is written in three steps, whatever the backend:

1. ``begin(id)``: mark the write as started (cloud: an ``.det_incomplete`` marker object).
2. ``put(src, id, paths)``: store files, hashing them on the way; returns their manifest part.
   Several ranks may ``put`` into the same checkpoint.
3. ``commit(id, manifest)``: make it visible as complete (direct access: write the manifest,
   fsync, rename the staging directory to ``<base>/<id>``; cloud: upload the manifest last).

``abort(id)`` removes whatever a failed write left behind. ``upload()`` and ``store_path()`` run
the three steps for a single writer.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import pathlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

from determined.common.storage import _manifest
from determined.common.storage._manifest import Manifest

logger = logging.getLogger("determined.common.storage")

Selector = Callable[[str], bool]


class StorageManager(abc.ABC):
    """Stores checkpoints under a storage id (a uuid).

    Readers (``restore_path``, ``download``) verify files against the checkpoint's manifest and
    raise :class:`determined.errors.CheckpointCorrupted` or
    :class:`determined.errors.CheckpointIncomplete` naming the bad file; a missing id raises
    :class:`determined.errors.CheckpointNotFound`. A checkpoint without a manifest (written by
    Determined itself, or by hand) is read with a warning and without verification.
    """

    @staticmethod
    def _list_directory(root: str | os.PathLike[str]) -> dict[str, int]:
        """Relative path -> size of everything under ``root`` (directories end in ``/``)."""
        return _manifest.list_directory(root)

    @abc.abstractmethod
    def store_path_is_direct_access(self) -> bool:
        """True when ``pre_store_path`` is on the storage itself (nothing to upload)."""

    @abc.abstractmethod
    def pre_store_path(self, storage_id: str) -> pathlib.Path:
        """Create and return the local directory that a checkpoint's files are written into
        before ``upload(that_dir, storage_id)`` commits them. Every rank gets the same path."""

    @abc.abstractmethod
    def begin(self, storage_id: str) -> None:
        """Mark a write of ``storage_id`` as started. Call once, before any ``put``."""

    @abc.abstractmethod
    def put(
        self, src: str | os.PathLike[str], storage_id: str, paths: Collection[str] | None = None
    ) -> Manifest:
        """Store the files of ``src`` (only ``paths``, relative as from ``_list_directory``,
        when given) under ``storage_id``, not yet visible as a checkpoint."""

    @abc.abstractmethod
    def commit(self, storage_id: str, manifest: Manifest) -> None:
        """Make ``storage_id`` a complete checkpoint whose contents are ``manifest``."""

    @abc.abstractmethod
    def abort(self, storage_id: str) -> None:
        """Remove what an unfinished write of ``storage_id`` left (never a committed one)."""

    @abc.abstractmethod
    def restore_path(
        self, storage_id: str, selector: Selector | None = None
    ) -> contextlib.AbstractContextManager[pathlib.Path]:
        """A context manager yielding a local directory with the (verified) checkpoint."""

    @abc.abstractmethod
    def download(
        self, src: str, dst: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        """Copy checkpoint ``src`` into the local directory ``dst``, verifying every file."""

    @abc.abstractmethod
    def put_files(self, src_dir: pathlib.Path, dst_prefix: str, files: Mapping[str, str]) -> None:
        """Copy ``src_dir/<src>`` to ``<dst_prefix>/<dst>`` under the storage's base for each
        ``src -> dst``, replacing what is there: files outside any checkpoint (TensorBoard
        files, batch-inference outputs), not verified and never garbage-collected."""

    @abc.abstractmethod
    def delete(self, storage_id: str) -> None:
        """Remove a checkpoint. A checkpoint that is already gone is logged, not an error."""

    @abc.abstractmethod
    def remove_files(self, storage_id: str, globs: Sequence[str]) -> dict[str, int]:
        """Remove the files of a committed checkpoint that ``globs`` name (``_globs``) and
        return what is left (relative path -> size, directories ``a/`` with 0). The manifest is
        rewritten first, so a removal cut short leaves unlisted extra files, never listed
        missing ones. With no file left the whole checkpoint is deleted (``{}``); no globs
        only reads what is there."""

    def upload(
        self,
        src: str | os.PathLike[str],
        dst: str,
        paths: Collection[str] | None = None,
    ) -> Manifest:
        """Store ``src`` as checkpoint ``dst`` atomically: on any error nothing is left under
        ``dst`` and the error propagates. Returns the committed manifest."""
        try:
            self.begin(dst)
            manifest = self.put(src, dst, paths)
            self.commit(dst, manifest)
        except BaseException:
            self.discard(dst)
            raise
        return manifest

    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[pathlib.Path]:
        """Yield a directory to write checkpoint ``storage_id`` into; commit it on a clean exit,
        discard it if the body raises."""
        path = self.pre_store_path(storage_id)
        try:
            yield path
        except BaseException:
            self.discard(storage_id)
            raise
        self.upload(path, storage_id)

    @abc.abstractmethod
    def discard_staging(self, storage_id: str) -> None:
        """Remove the local staging directory of ``storage_id`` (``pre_store_path``), if any;
        never anything committed."""

    def discard(self, storage_id: str) -> None:
        """``abort``, logging instead of raising: for cleanup while another error propagates."""
        try:
            self.abort(storage_id)
        except Exception as e:  # the original error matters more than a failed cleanup
            logger.warning(f"could not clean up unfinished checkpoint {storage_id}: {e}")


def warn_unverified(storage_id: str, where: str) -> None:
    logger.warning(
        f"checkpoint {storage_id} at {where} has no {_manifest.MANIFEST_NAME} (it was written by "
        "Determined or by hand); using it without verifying its files"
    )
