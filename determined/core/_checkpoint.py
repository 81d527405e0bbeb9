"""``core_context.checkpoint``: save checkpoints to storage, commit them atomically, report
them, and read them back verified.

Every checkpoint is written under a temporary name and committed only when complete, with a
manifest of each file's size and sha256 (``determined.common.storage``); nothing is reported
before the commit, so a master never hears of a partial checkpoint.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import pathlib
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from determined import errors
from determined.common import storage
from determined.common.storage import Manifest
from determined.core import _checkpoint_merge as merge
from determined.core import _checkpoint_read as read
from determined.core._checkpoint_async import BackgroundWriter
from determined.core._checkpoint_read import DownloadMode
from determined.core._checkpoint_reporter import (
    CheckpointReporter,
    ClusterCheckpointReporter,
    LocalCheckpointReporter,
)
from determined.core._distributed import DistributedContext

logger = logging.getLogger("determined.core")

Selector = Callable[[str], bool]
PathLike = str | os.PathLike[str]

__all__ = [
    "CheckpointContext",
    "CheckpointReporter",
    "DummyCheckpointContext",
    "ClusterCheckpointReporter",
    "DownloadMode",
    "LocalCheckpointReporter",
]


class _Outcome:
    """One rank's result of storing its files in a sharded write, or why it failed."""

    def __init__(self, manifest: Manifest | None, error: str | None = None) -> None:
        self.manifest, self.error = manifest, error


def _metadata_bytes(metadata: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(metadata, indent=2).encode()
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"checkpoint metadata must be JSON-serializable ({e}); convert tensors and arrays "
            "to Python numbers or lists"
        ) from e


class CheckpointContext:
    """Checkpoint storage for a trial: ``core_context.checkpoint``.

    Args:
        dist: the trial's DistributedContext (rank 0 alone for a single process).
        storage_manager: where checkpoints go (``determined.common.storage``).
        reporter: who hears of committed checkpoints: :class:`LocalCheckpointReporter` or
            :class:`ClusterCheckpointReporter`.
    """

    def __init__(
        self,
        dist: DistributedContext,
        storage_manager: storage.StorageManager,
        reporter: CheckpointReporter,
    ) -> None:
        self._dist = dist
        self._storage_manager = storage_manager
        self._reporter = reporter
        self._background = BackgroundWriter()

    # ---- saving -------------------------------------------------------------------------------

    def upload(
        self,
        ckpt_dir: PathLike | None,
        metadata: dict[str, Any] | None = None,
        *,
        shard: bool = False,
        selector: Selector | None = None,
    ) -> str:
        """Store the contents of ``ckpt_dir`` as a new checkpoint; returns its storage id.

        ``shard=False``: rank 0 only (RuntimeError elsewhere, or with ``ckpt_dir=None``).
        ``shard=True``: a collective; every rank calls it, ranks with nothing to add pass None
        (RuntimeError if all do), and the checkpoint is the union of all ranks' files.
        Duplicated files must be identical, and duplicated metadata keys equal
        (RuntimeError "files conflicts" / "metadata conflicts"). ``selector(relpath)`` picks
        which files (directories end in ``/``) to store. ``metadata.json`` with ``metadata`` is
        always added to the checkpoint, never to ``ckpt_dir``.

        Raises ValueError before storing anything if the reporter refuses ``metadata`` (on a
        cluster: no ``steps_completed``).
        """
        ckpt = os.fspath(ckpt_dir) if ckpt_dir is not None else None
        if not shard:
            if self._dist.get_rank() != 0:
                raise RuntimeError(
                    "cannot call .upload(shard=False) from non-chief worker "
                    f"(rank={self._dist.get_rank()}); call it on rank 0, or pass shard=True on all"
                )
            if ckpt is None:
                raise RuntimeError(
                    "cannot call .upload(ckpt_dir=None, shard=False), which would do nothing"
                )
            return self._upload_single(ckpt, metadata or {}, selector)
        storage_id = self._dist.broadcast(str(uuid.uuid4()) if self._dist.get_rank() == 0 else None)
        return self._upload_sharded(ckpt, storage_id, metadata or {}, selector=selector)

    def _upload_single(
        self, ckpt_dir: str, metadata: dict[str, Any], selector: Selector | None
    ) -> str:
        self._reporter.check(metadata)
        meta = _metadata_bytes(metadata)
        storage_id = str(uuid.uuid4())
        paths = None
        if selector is not None:
            paths = {p for p in storage.StorageManager._list_directory(ckpt_dir) if selector(p)}
        sm = self._storage_manager
        try:
            sm.begin(storage_id)
            manifest = sm.put(ckpt_dir, storage_id, paths)
            manifest.update(self._put_metadata(storage_id, meta))
            sm.commit(storage_id, manifest)
        except BaseException:
            sm.discard(storage_id)
            raise
        self._report(storage_id, manifest.resources(), metadata)
        return storage_id

    def _report(self, storage_id: str, resources: dict[str, int], metadata: dict[str, Any]) -> None:
        """Report a committed checkpoint. One the master can never have heard of (it was down
        for every attempt) is deleted before the error goes up: the trial cannot resume from
        an unregistered checkpoint, and nothing would ever GC its files."""
        try:
            self._reporter.report(storage_id, resources, metadata)
        except errors.MasterUnreachable as e:
            if not e.maybe_delivered:
                logger.warning(f"the master never learned of checkpoint {storage_id}; deleting it")
                with contextlib.suppress(Exception):
                    self._storage_manager.delete(storage_id)
            raise

    def _put_metadata(self, storage_id: str, meta: bytes) -> Manifest:
        with tempfile.TemporaryDirectory() as tmp:
            pathlib.Path(tmp, "metadata.json").write_bytes(meta)
            return self._storage_manager.put(tmp, storage_id, {"metadata.json"})

    def _merge_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        merged, conflicts = merge.merge_metadata(self._dist.allgather(metadata))
        if conflicts:
            raise merge.conflict_error(self._dist, conflicts, "metadata")
        return merged

    def _upload_sharded(
        self,
        ckpt_dir: str | None,
        storage_id: str,
        metadata: dict[str, Any],
        *,
        selector: Selector | None = None,
    ) -> str:
        if selector is not None and ckpt_dir is None:
            raise RuntimeError("upload(shard=True) with a selector needs a ckpt_dir on that rank")
        if not any(self._dist.allgather(ckpt_dir is not None)):
            raise RuntimeError(
                "cannot call .upload(ckpt_dir=None, shard=True) from all ranks; at least one "
                "rank must pass a directory"
            )
        uid = None
        if ckpt_dir is not None:
            st = os.stat(ckpt_dir)
            uid = (st.st_dev, st.st_ino)
        uids = self._dist.allgather(uid)
        # A directory that several ranks share (same device and inode) is stored once, by the
        # lowest of them, unless ranks pick their files with selectors.
        want = selector is not None or (uid is not None and uids.index(uid) == self._dist.rank)
        return self._store_sharded(ckpt_dir if want else None, storage_id, metadata, selector)

    def _store_sharded(
        self,
        src: str | None,
        storage_id: str,
        metadata: dict[str, Any],
        selector: Selector | None,
    ) -> str:
        """The collective part of a sharded cloud-style write: every rank calls it; ``src`` is
        None on ranks that store nothing."""
        resources: dict[str, int] = {}
        if src is not None:
            resources = storage.StorageManager._list_directory(src)
            if selector is not None:
                resources = {k: v for k, v in resources.items() if selector(k)}
        _, conflicts = merge.merge_resources(self._dist.allgather(resources))
        resources = merge.resolve_file_conflicts(self._dist, resources, conflicts, src)
        merged = self._merge_metadata(metadata)
        self._reporter.check(merged)
        meta = _metadata_bytes(merged)
        sm, chief = self._storage_manager, self._dist.get_rank() == 0
        if chief:
            sm.begin(storage_id)
        self._dist.allgather(None)  # nobody stores before the chief has begun the checkpoint
        outcome = self._put_part(src, storage_id, set(resources), meta if chief else None)
        outcomes: list[_Outcome] = self._dist.allgather(outcome)
        self._finish_sharded(storage_id, outcomes, merged)
        return storage_id

    def _put_part(
        self, src: str | None, storage_id: str, paths: set[str], meta: bytes | None
    ) -> _Outcome:
        try:
            part = Manifest()
            if src is not None and paths:
                part = self._storage_manager.put(src, storage_id, paths)
            if meta is not None:
                part.update(self._put_metadata(storage_id, meta))
            return _Outcome(part)
        except Exception as e:
            return _Outcome(None, f"{type(e).__name__}: {e}")

    def _finish_sharded(
        self, storage_id: str, outcomes: list[_Outcome], metadata: dict[str, Any]
    ) -> None:
        failed = [(r, o.error) for r, o in enumerate(outcomes) if o.manifest is None]
        if failed:
            if self._dist.get_rank() == 0:
                self._storage_manager.discard(storage_id)
            raise RuntimeError(
                f"checkpoint {storage_id} was not saved: storing files failed on "
                + "; ".join(f"rank {r}: {err}" for r, err in failed)
            )
        manifest = Manifest()
        for o in outcomes:
            manifest.update(o.manifest or Manifest())
        self._chief_commits(storage_id, manifest, None, metadata)

    def _chief_commits(
        self, storage_id: str, manifest: Manifest | None, src: pathlib.Path | None, metadata: Any
    ) -> None:
        """The end of every sharded write: the chief commits (``manifest``, or by hashing
        ``src`` in place) and reports; then all ranks learn whether that worked, so that every
        rank leaves ``upload``/``store_path`` only once the checkpoint is committed."""
        error = None
        if self._dist.get_rank() == 0:
            sm = self._storage_manager
            try:
                if manifest is None:
                    assert src is not None
                    manifest = sm.upload(src, storage_id)
                else:
                    try:
                        sm.commit(storage_id, manifest)
                    except BaseException:
                        sm.discard(storage_id)
                        raise
                self._report(storage_id, manifest.resources(), metadata)
            except Exception as e:
                error = e
        message = self._dist.broadcast(
            None if error is None else f"{type(error).__name__}: {error}"
        )
        if error is not None:
            raise error
        if message is not None:
            raise RuntimeError(f"checkpoint {storage_id} was not saved: on rank 0, {message}")

    @contextlib.contextmanager
    def store_path(
        self, metadata: dict[str, Any] | None = None, *, shard: bool = False
    ) -> Iterator[tuple[pathlib.Path, str]]:
        """A context manager yielding ``(path, storage_id)``: write the checkpoint's files into
        ``path``. On a clean exit ``metadata.json`` is added, the checkpoint is committed
        (direct-access storage: hashed, fsynced and renamed to ``<base>/<storage_id>``; cloud:
        uploaded, then the local copy removed) and reported. If the body raises, nothing is
        committed or reported and the files are removed.

        ``path`` is a staging directory, not the final location (``<base>/.<id>.tmp`` on
        shared_fs/directory, ``<tmp>/<id>`` for cloud storage): use it only inside the block.

        ``shard=False``: rank 0 only (RuntimeError elsewhere). ``shard=True``: a collective;
        every rank gets the same storage id and writes its own files; metadata is merged as in
        :meth:`upload`. Raises ValueError before yielding if the reporter refuses the metadata.
        """
        if not shard:
            return self._store_path_single(metadata or {})
        return self._store_path_sharded(metadata or {})

    def _store_path_single(self, metadata: dict[str, Any]) -> Iterator[tuple[pathlib.Path, str]]:
        if self._dist.get_rank() != 0:
            raise RuntimeError(
                "cannot call CheckpointContext.store_path(shard=False) from non-chief worker "
                f"(rank={self._dist.get_rank()}); call it on rank 0, or pass shard=True on all"
            )
        self._reporter.check(metadata)
        meta = _metadata_bytes(metadata)
        storage_id = str(uuid.uuid4())
        sm = self._storage_manager
        path = sm.pre_store_path(storage_id)
        try:
            yield path, storage_id
        except BaseException:
            sm.discard(storage_id)
            raise
        (path / "metadata.json").write_bytes(meta)
        manifest = sm.upload(path, storage_id)
        self._report(storage_id, manifest.resources(), metadata)

    def _store_path_sharded(self, metadata: dict[str, Any]) -> Iterator[tuple[pathlib.Path, str]]:
        chief = self._dist.get_rank() == 0
        storage_id = self._dist.broadcast(str(uuid.uuid4()) if chief else None)
        merged = self._merge_metadata(metadata)  # before the body, so a refusal costs no writes
        self._reporter.check(merged)
        meta = _metadata_bytes(merged)
        sm = self._storage_manager
        path = sm.pre_store_path(storage_id)
        try:
            yield path, storage_id
            if sm.store_path_is_direct_access():
                self._dist.allgather(None)  # every rank has finished writing into the directory
                if chief:
                    (path / "metadata.json").write_bytes(meta)
                self._chief_commits(storage_id, None, path, merged)
            else:
                st = os.stat(path)
                uids = self._dist.allgather((st.st_dev, st.st_ino))
                lowest = uids.index((st.st_dev, st.st_ino)) == self._dist.get_rank()
                self._store_sharded(os.fspath(path) if lowest else None, storage_id, metadata, None)
        finally:
            # Only the local staging copy: what reached storage is the chief's to keep or abort.
            sm.discard_staging(storage_id)

    # ---- in the background ------------------------------------------------------------------

    def store_path_in_background(
        self, write: Callable[[pathlib.Path], None], metadata: dict[str, Any] | None = None
    ) -> concurrent.futures.Future[str]:
        """Save a checkpoint without blocking: ``write(path)`` fills the checkpoint directory
        on a background thread, which then commits and reports it exactly as
        :meth:`store_path` does. Returns a future of the storage id.

        ``write`` must only read what the caller has already copied (staged) for it: the
        caller goes on changing its live state as soon as this returns. Rank 0 only
        (RuntimeError elsewhere). One checkpoint is written at a time: this first waits for
        the previous one, and raises :class:`determined.errors.CheckpointFailed` if that one
        failed. Raises ValueError at once if the reporter refuses ``metadata``.

        A failed write commits and reports nothing; the failure is raised by the next
        ``store_path_in_background``, :meth:`wait_for_background`, or the core context's
        close. A process killed mid-write leaves no checkpoint the master knows of.
        """
        if self._dist.get_rank() != 0:
            raise RuntimeError(
                "cannot call store_path_in_background() from non-chief worker "
                f"(rank={self._dist.get_rank()}); gather what to save on rank 0 first"
            )
        meta = dict(metadata or {})
        self._reporter.check(meta)
        _metadata_bytes(meta)

        def run() -> str:
            with self.store_path(meta) as (path, storage_id):
                write(path)
            return storage_id

        return self._background.submit(run)

    def wait_for_background(self) -> str | None:
        """Block until the checkpoint being written in the background (if any) is committed
        and reported; returns its storage id, or None if none was outstanding. Raises
        :class:`determined.errors.CheckpointFailed` if it failed (once; nothing of it was
        registered)."""
        return self._background.wait()

    def _background_done(self) -> bool:
        """Whether a background write has ended and awaits :meth:`wait_for_background`."""
        return self._background.done()

    def _close(self) -> None:
        self._background.close()

    # ---- reading and deleting ----------------------------------------------------------------

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[pathlib.Path]:
        """A context manager yielding a local directory with checkpoint ``storage_id``.

        shared_fs/directory storage yields ``<base>/<storage_id>`` in place (the selector is
        ignored, with a warning); cloud storage downloads into a temporary directory that is
        removed on exit. Files are verified against the checkpoint's manifest first.

        With ``LocalWorkersShareDownload`` (default) every rank must call it; the first rank of
        each machine fetches and the others wait for it, and on exit each machine's ranks wait
        for each other before cleanup. ``selector(relpath)`` limits what is fetched (a path is
        fetched if any rank of the machine selects it).

        Raises:
            determined.errors.CheckpointNotFound: no such checkpoint.
            determined.errors.CheckpointCorrupted: a file does not match the manifest.
            determined.errors.CheckpointIncomplete: the checkpoint was never committed, or a
                file listed in its manifest is missing.
        """
        mode = DownloadMode(download_mode)
        if mode == DownloadMode.NoSharedDownload:
            with self._storage_manager.restore_path(storage_id, selector) as path:
                yield path
            return
        with read.shared_restore(self._dist, self._storage_manager, storage_id, selector) as path:
            yield path

    def download(
        self,
        storage_id: str,
        ckpt_dir: PathLike,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy checkpoint ``storage_id`` into ``ckpt_dir`` (created if needed), verifying each
        file; coordination, selector and errors as in :meth:`restore_path` (with the default
        mode only the first rank of each machine writes into ``ckpt_dir``)."""
        mode = DownloadMode(download_mode)
        dst = os.fspath(ckpt_dir)
        if mode == DownloadMode.NoSharedDownload:
            self._storage_manager.download(storage_id, dst, selector)
            return
        read.shared_download(self._dist, self._storage_manager, storage_id, dst, selector)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The metadata the master holds for ``storage_id`` (``{}`` if none). Without a master
        this raises NotImplementedError, as in the reference."""
        return self._reporter.get_metadata(storage_id)

    def delete(self, storage_id: str) -> None:
        """Remove checkpoint ``storage_id`` from storage and mark it deleted on the master. Call
        it on one rank. A checkpoint already gone from storage is logged, not an error."""
        self._storage_manager.delete(storage_id)
        self._reporter.mark_deleted(storage_id)


class DummyCheckpointContext(CheckpointContext):
    """A CheckpointContext that reports to no master (checkpoints are logged)."""

    def __init__(self, dist: DistributedContext, storage_manager: storage.StorageManager) -> None:
        super().__init__(dist, storage_manager, LocalCheckpointReporter())
