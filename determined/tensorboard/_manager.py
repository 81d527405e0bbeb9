"""Copying a trial's TensorBoard files to storage while it runs.

``TensorboardManager`` watches one local directory (``base_path``) and copies new or changed
files (by size and modification time) to ``<storage>/<sync_path>/...``, from a background
thread once started. It needs one thing from a storage backend: ``put_files`` (the
``TensorboardStorage`` protocol).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import queue
import random
import shutil
import threading
import time
import types
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

logger = logging.getLogger("determined.tensorboard")

Selector = Callable[[pathlib.Path], bool]
Mangler = Callable[[pathlib.Path, int], pathlib.PurePath]

# Automatic syncs (after each metric report) happen at most this often, to stay within cloud
# storage request quotas (the reference's limit).
MIN_AUTO_SYNC_INTERVAL_S = 1.0
UPLOAD_QUEUE_MAXSIZE = 50

_Stat = tuple[int, int]  # (size, mtime_ns)


class TensorboardStorage(Protocol):
    """The part of a storage backend that TensorBoard syncing uses."""

    def put_files(self, src_dir: pathlib.Path, dst_prefix: str, files: Mapping[str, str]) -> None:
        """Copy ``src_dir/<src>`` to ``<storage root>/<dst_prefix>/<dst>`` for each
        ``src -> dst`` in ``files`` (relative POSIX paths), replacing what is there. Raises on
        failure; may have copied some files by then."""
        ...


class DirectoryTensorboardStorage:
    """``TensorboardStorage`` on a directory (shared_fs, directory storage, local runs)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = pathlib.Path(root)

    def __repr__(self) -> str:
        return f"DirectoryTensorboardStorage({str(self.root)!r})"

    def put_files(self, src_dir: pathlib.Path, dst_prefix: str, files: Mapping[str, str]) -> None:
        for src, dst in files.items():
            target = self.root / dst_prefix / dst
            target.parent.mkdir(parents=True, exist_ok=True)
            # In place, not a rename: a TensorBoard server reading the copy keeps its open file
            # and sees the appended events.
            shutil.copyfile(src_dir / src, target)


def _all_files(_: pathlib.Path) -> bool:
    return True


def _same_name(path: pathlib.Path, _rank: int) -> pathlib.PurePath:
    return path


class TensorboardManager:
    """Syncs the files under ``base_path`` to ``storage`` at ``sync_path``.

    Built by ``core.init()`` on a cluster (chief and workers alike); ``TrainContext`` calls
    ``sync()`` after each report in AUTO mode and from ``upload_tensorboard_files()`` in
    MANUAL mode. After ``start()``, uploads run on a background thread and a failed upload
    is logged as a warning and retried at the next sync; before it (or with
    ``async_upload=False``) ``sync()`` uploads before returning and raises what fails.

    Args:
        base_path: the local directory whose files are synced (it need not exist yet).
        sync_path: where they go, relative to the storage root (see ``get_sync_path``).
        storage: anything with ``put_files`` (``TensorboardStorage``).
        async_upload: upload from a background thread once started.
        sync_on_close: ``close()`` syncs once more (the Core API sets it in AUTO mode only).
    """

    def __init__(
        self,
        base_path: str | os.PathLike[str],
        sync_path: str | pathlib.PurePath,
        storage: TensorboardStorage,
        *,
        async_upload: bool = True,
        sync_on_close: bool = True,
    ) -> None:
        self.base_path = pathlib.Path(base_path)
        self.sync_path = pathlib.PurePosixPath(sync_path)
        self.storage = storage
        self.sync_on_close = sync_on_close
        self._uploaded: dict[tuple[str, str], _Stat] = {}
        self._lock = threading.Lock()  # guards _uploaded: the upload thread forgets failures
        self._last_sync: float | None = None
        self._thread = _UploadThread(self._upload_in_thread) if async_upload else None

    def start(self) -> None:
        """Start the upload thread (once; later calls do nothing)."""
        if self._thread is not None and not self._thread.is_alive() and not self._thread.done:
            self._thread.start()

    def sync(
        self,
        selector: Selector | None = None,
        mangler: Mangler | None = None,
        rank: int = 0,
    ) -> None:
        """Copy new and changed files to storage.

        With neither ``selector`` nor ``mangler`` this is an automatic sync, skipped when the
        previous sync began less than a second ago (the files are picked up by a later one).
        With either, it always runs: ``selector(path)`` gets each file's full path and says
        whether to upload it; ``mangler(relative_path, rank)`` names its copy, relative to
        ``sync_path``.

        Raises:
            ValueError: ``mangler`` returned an absolute path or one that leaves ``sync_path``.
        """
        now = time.monotonic()
        automatic = selector is None and mangler is None
        last = self._last_sync
        if automatic and last is not None and now - last < MIN_AUTO_SYNC_INTERVAL_S:
            return
        self._last_sync = now
        batch = self._changed_files(selector or _all_files, mangler or _same_name, rank)
        if not batch.names:
            return
        if self._thread is not None and self._thread.is_alive():
            self._thread.submit(batch)
        else:
            self._upload_now(batch)

    def close(self) -> None:
        """Sync once more if ``sync_on_close``, then wait for every queued upload to finish."""
        try:
            if self.sync_on_close:
                self.sync(_all_files)  # an explicit selector: never skipped by the rate limit
        finally:
            if self._thread is not None and self._thread.is_alive():
                self._thread.stop()

    def __enter__(self) -> TensorboardManager:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: types.TracebackType | None,
    ) -> None:
        self.close()

    def _changed_files(self, selector: Selector, mangler: Mangler, rank: int) -> _Batch:
        """Files not uploaded in their current state. They are recorded as uploaded at once, so
        a sync before their upload finishes does not queue them again; a failure undoes that."""
        found: dict[tuple[str, str], _Stat] = {}
        for rel in _list_files(self.base_path):
            path = self.base_path / rel
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # removed since the listing
            if selector(path):
                dst = _checked_name(mangler(pathlib.Path(rel), rank), rel)
                found[(rel, dst)] = (st.st_size, st.st_mtime_ns)
        with self._lock:  # only after every name was checked: a bad one records nothing
            changed = {k: v for k, v in found.items() if self._uploaded.get(k) != v}
            self._uploaded.update(changed)
        return _Batch({rel: dst for rel, dst in changed}, changed)

    def _upload_now(self, batch: _Batch) -> None:
        # Storage clients may draw from the global RNGs (retry jitter); training must not notice.
        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            self.storage.put_files(self.base_path, str(self.sync_path), batch.names)
        except BaseException:
            self._forget(batch)
            raise
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)

    def _upload_in_thread(self, batch: _Batch) -> None:
        try:
            self.storage.put_files(self.base_path, str(self.sync_path), batch.names)
        except Exception as e:
            self._forget(batch)
            logger.warning(
                f"uploading {len(batch.names)} TensorBoard file(s) to {self.storage!r} failed "
                f"({e}); they are retried at the next sync"
            )

    def _forget(self, batch: _Batch) -> None:
        with self._lock:
            for key, stat in batch.stats.items():
                if self._uploaded.get(key) == stat:
                    del self._uploaded[key]


@dataclasses.dataclass
class _Batch:
    names: dict[str, str]  # src -> dst, both relative
    stats: dict[tuple[str, str], _Stat]  # what was recorded as uploaded, to undo on failure


def _list_files(root: pathlib.Path) -> list[str]:
    """Relative POSIX paths of the regular files under ``root`` (none if it does not exist)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = pathlib.Path(dirpath).relative_to(root)
        for name in sorted(filenames):
            if os.path.isfile(os.path.join(dirpath, name)):
                out.append((rel_dir / name).as_posix())
    return out


def _checked_name(mangled: pathlib.PurePath, rel: str) -> str:
    name = pathlib.PurePosixPath(mangled)
    if name.is_absolute() or ".." in name.parts or str(name) in ("", "."):
        raise ValueError(
            f"the mangler turned {rel!r} into {str(mangled)!r}; it must return a relative path "
            "inside the trial's TensorBoard directory (no leading '/', no '..')"
        )
    return name.as_posix()


class _UploadThread(threading.Thread):
    """Runs uploads in submission order; ``stop()`` drains the queue first."""

    def __init__(self, upload: Callable[[_Batch], None]) -> None:
        super().__init__(name="tensorboard-upload", daemon=True)
        self._upload = upload
        self._queue: queue.Queue[_Batch | None] = queue.Queue(maxsize=UPLOAD_QUEUE_MAXSIZE)
        self.done = False

    def submit(self, batch: _Batch) -> None:
        # Blocks when 50 uploads are queued: storage far slower than reporting slows training
        # rather than growing memory without bound.
        self._queue.put(batch)

    def run(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            self._upload(batch)

    def stop(self) -> None:
        self._queue.put(None)
        self.join(10)
        while self.is_alive():
            logger.info("waiting for TensorBoard files to finish uploading")
            self.join(10)
        self.done = True
