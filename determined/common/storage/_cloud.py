"""Object-store storage (s3, gcs): checkpoints are objects under ``<prefix>/<id>/``.

Files are staged in a local temporary directory, then uploaded. The commit order makes a
half-uploaded checkpoint recognisable: an empty ``.det_incomplete`` marker object goes up first,
then the files, then ``.det_manifest.json``, and the marker is removed last. A reader that finds
the marker but no manifest raises :class:`determined.errors.CheckpointIncomplete`; one that finds
neither (a checkpoint written by Determined) reads it unverified, with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import shutil
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Protocol

from determined import errors
from determined.common.storage import _globs, _manifest
from determined.common.storage._base import Selector, StorageManager, warn_unverified
from determined.common.storage._manifest import MANIFEST_NAME, FileEntry, Manifest

logger = logging.getLogger("determined.common.storage")

MARKER_NAME = ".det_incomplete"


class ObjectStore(Protocol):
    """The few bucket operations a cloud storage manager needs. Keys are full object names."""

    location: str

    def put_file(self, key: str, path: str) -> None: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_file(self, key: str, path: str) -> None: ...

    def get_bytes(self, key: str) -> bytes | None: ...

    def list_prefix(self, prefix: str) -> dict[str, int]: ...

    def delete(self, keys: list[str]) -> None: ...


class CloudStorageManager(StorageManager):
    """A StorageManager over an :class:`ObjectStore`. ``temp_dir`` (default
    ``tempfile.gettempdir()``) holds staged and downloaded files."""

    def __init__(self, store: ObjectStore, prefix: str | None, temp_dir: str | None) -> None:
        self._store = store
        self._prefix = (prefix or "").strip("/")
        self._temp_dir = pathlib.Path(temp_dir or tempfile.gettempdir())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store.location}/{self._prefix})"

    def _key(self, storage_id: str, rel: str = "") -> str:
        if not storage_id or "/" in storage_id:
            raise ValueError(f"{storage_id!r} is not a valid checkpoint storage id")
        head = f"{self._prefix}/{storage_id}/" if self._prefix else f"{storage_id}/"
        return head + rel

    def _listing(self, storage_id: str) -> dict[str, int]:
        head = self._key(storage_id)
        return {k[len(head) :]: s for k, s in self._store.list_prefix(head).items() if k != head}

    def store_path_is_direct_access(self) -> bool:
        return False

    def put_files(self, src_dir: pathlib.Path, dst_prefix: str, files: Mapping[str, str]) -> None:
        """Copy ``src_dir/<src>`` to the object ``<prefix>/<dst_prefix>/<dst>`` for each
        ``src -> dst``: how a trial's TensorBoard files reach a bucket."""
        head = "/".join(p for p in (self._prefix, dst_prefix.strip("/")) if p)
        for src, dst in files.items():
            self._store.put_file(f"{head}/{dst}", str(src_dir / src))

    def get_files(self, src_prefix: str, dst_dir: pathlib.Path) -> int:
        """Copy every object under ``<prefix>/<src_prefix>/`` to ``dst_dir`` (same relative
        paths), skipping files already there with the object's size; the reverse of
        ``put_files`` (``det tensorboard`` reads a trial's synced event files so). Returns how
        many files were copied."""
        head = "/".join(p for p in (self._prefix, src_prefix.strip("/")) if p) + "/"
        copied = 0
        for key, size in sorted(self._store.list_prefix(head).items()):
            rel = key[len(head) :]
            target = dst_dir / rel
            if not rel or rel.endswith("/") or ".." in pathlib.PurePosixPath(rel).parts:
                continue
            if target.is_file() and target.stat().st_size == size:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # A name without "tfevents": TensorBoard never reads a half-copied file.
            partial = target.parent / f".det_partial.{os.getpid()}"
            self._store.get_file(key, str(partial))
            os.replace(partial, target)
            copied += 1
        return copied

    def pre_store_path(self, storage_id: str) -> pathlib.Path:
        path = self._temp_dir / storage_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def begin(self, storage_id: str) -> None:
        self._store.put_bytes(self._key(storage_id, MARKER_NAME), b"")

    def put(
        self, src: str | os.PathLike[str], storage_id: str, paths: Collection[str] | None = None
    ) -> Manifest:
        listing = _manifest.list_directory(src)
        if paths is not None:
            wanted = set(paths)
            listing = {p: s for p, s in listing.items() if p in wanted}
        dirs = {p for p in listing if p.endswith("/")}
        for d in sorted(dirs):
            self._store.put_bytes(self._key(storage_id, d), b"")

        def one(rel: str) -> FileEntry:
            local = os.path.join(src, rel)
            entry = _manifest.hash_file(local)
            self._store.put_file(self._key(storage_id, rel), local)
            return entry

        files = [p for p in listing if not p.endswith("/")]
        return Manifest(_manifest.parallel(one, files), dirs)

    def commit(self, storage_id: str, manifest: Manifest) -> None:
        self._store.put_bytes(self._key(storage_id, MANIFEST_NAME), manifest.to_json(storage_id))
        self._store.delete([self._key(storage_id, MARKER_NAME)])
        shutil.rmtree(self._temp_dir / storage_id, ignore_errors=True)

    def discard_staging(self, storage_id: str) -> None:
        shutil.rmtree(self._temp_dir / storage_id, ignore_errors=True)

    def abort(self, storage_id: str) -> None:
        shutil.rmtree(self._temp_dir / storage_id, ignore_errors=True)
        keys = [self._key(storage_id, rel) for rel in self._listing(storage_id)]
        self._delete_marker_last(storage_id, keys)

    def _delete_marker_last(self, storage_id: str, keys: list[str]) -> None:
        marker, manifest = self._key(storage_id, MARKER_NAME), self._key(storage_id, MANIFEST_NAME)
        if manifest in keys:
            self._store.delete([manifest])
        self._store.delete([k for k in keys if k not in (marker, manifest)])
        self._store.delete([marker])

    def _load(self, storage_id: str) -> tuple[dict[str, int], Manifest | None]:
        listing = self._listing(storage_id)
        if not listing:
            raise errors.CheckpointNotFound(
                f"no checkpoint {storage_id} at {self._store.location}/{self._key(storage_id)}; "
                "check the storage id and the checkpoint_storage bucket and prefix"
            )
        data = self._store.get_bytes(self._key(storage_id, MANIFEST_NAME))
        if data is not None:
            return listing, Manifest.from_json(data, storage_id)
        if MARKER_NAME in listing:
            raise errors.CheckpointIncomplete(
                f"checkpoint {storage_id} was never committed: its upload started but did not "
                f"finish (no {MANIFEST_NAME}); restore from another checkpoint",
                storage_id=storage_id,
            )
        warn_unverified(storage_id, f"{self._store.location}/{self._key(storage_id)}")
        return listing, None

    def download(
        self, src: str, dst: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        listing, manifest = self._load(src)
        verify = manifest is not None
        if manifest is None:
            manifest = Manifest.unhashed(listing)
        chosen = manifest.select(selector)
        dst = pathlib.Path(dst)
        dst.mkdir(parents=True, exist_ok=True)
        for rel in sorted(chosen.dirs):
            (dst / rel).mkdir(parents=True, exist_ok=True)

        def fetch(rel: str) -> FileEntry | None:
            if rel not in listing:
                return None
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            self._store.get_file(self._key(src, rel), os.fspath(dst / rel))
            return _manifest.hash_file(dst / rel) if verify else None

        got = _manifest.parallel(fetch, chosen.files)
        if verify:
            for rel in sorted(chosen.files):
                _manifest.check_file(src, rel, chosen.files[rel], got[rel])

    @contextlib.contextmanager
    def restore_path(
        self, storage_id: str, selector: Selector | None = None
    ) -> Iterator[pathlib.Path]:
        self._temp_dir.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"restore-{storage_id}-", dir=self._temp_dir))
        try:
            self.download(storage_id, tmp, selector)
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remove_files(self, storage_id: str, globs: Sequence[str]) -> dict[str, int]:
        listing, manifest = self._load(storage_id)
        named = _globs.matcher(globs)
        files = {r: s for r, s in listing.items() if r not in (MANIFEST_NAME, MARKER_NAME)}
        left = {r: s for r, s in files.items() if not named(r)}
        if not any(not r.endswith("/") for r in left):
            self.delete(storage_id)
            return {}
        if manifest is not None and globs:
            kept = manifest.select(lambda p: not named(p))
            self._store.put_bytes(self._key(storage_id, MANIFEST_NAME), kept.to_json(storage_id))
        doomed = [self._key(storage_id, r) for r in files if r not in left]
        if doomed:
            self._store.delete(doomed)
        return dict(sorted(left.items()))

    def delete(self, storage_id: str) -> None:
        listing = self._listing(storage_id)
        if not listing:
            logger.warning(
                f"checkpoint {storage_id} is not in {self._store.location}; nothing to do"
            )
            return
        # The marker goes up first: a delete that fails halfway reads as incomplete, not as a
        # complete checkpoint with files missing.
        self._store.put_bytes(self._key(storage_id, MARKER_NAME), b"")
        self._delete_marker_last(storage_id, [self._key(storage_id, rel) for rel in listing])
