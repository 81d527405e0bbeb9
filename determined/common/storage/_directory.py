"""Direct-access storage: checkpoints are directories under a base path on a local or shared
file system (``shared_fs`` and ``directory`` in a ``checkpoint_storage`` config).

A checkpoint is written into ``<base>/.<id>.tmp``, its files are hashed and fsynced, the manifest
is written, and the directory is renamed to ``<base>/<id>`` in one ``os.rename``: a crash or an
error at any point leaves nothing at ``<base>/<id>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import posixpath
import shutil
from collections.abc import Collection, Iterator, Mapping, Sequence

from determined import errors
from determined.common.storage import _globs, _manifest
from determined.common.storage._base import Selector, StorageManager, warn_unverified
from determined.common.storage._manifest import MANIFEST_NAME, Manifest

logger = logging.getLogger("determined.common.storage")


class DirectoryStorageManager(StorageManager):
    """Checkpoints as directories ``<base_path>/<storage_id>``, written in place and committed by
    rename. ``base_path`` is created (mode 0777, less the umask) when the first checkpoint is
    written."""

    def __init__(self, base_path: str | os.PathLike[str]) -> None:
        self._base_path = pathlib.Path(os.path.abspath(os.fspath(base_path)))

    @property
    def base_path(self) -> pathlib.Path:
        return self._base_path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._base_path)!r})"

    def store_path_is_direct_access(self) -> bool:
        return True

    def _final(self, storage_id: str) -> pathlib.Path:
        if not storage_id or "/" in storage_id or storage_id.startswith("."):
            raise ValueError(f"{storage_id!r} is not a valid checkpoint storage id")
        return self._base_path / storage_id

    def _staging(self, storage_id: str) -> pathlib.Path:
        # Deterministic, so that every rank of a sharded write finds the same directory.
        return self._base_path / f".{storage_id}.tmp"

    def pre_store_path(self, storage_id: str) -> pathlib.Path:
        self._final(storage_id)
        os.makedirs(self._base_path, mode=0o777, exist_ok=True)
        path = self._staging(storage_id)
        path.mkdir(exist_ok=True)
        return path

    def begin(self, storage_id: str) -> None:
        self.pre_store_path(storage_id)

    def put(
        self, src: str | os.PathLike[str], storage_id: str, paths: Collection[str] | None = None
    ) -> Manifest:
        staging = self.pre_store_path(storage_id)
        if os.path.realpath(src) == os.path.realpath(staging):
            return _manifest.hash_tree(staging, paths, fsync=True)
        listing = _manifest.list_directory(src)
        if paths is not None:
            wanted = set(paths)
            listing = {p: s for p, s in listing.items() if p in wanted}
        dirs = {p for p in listing if p.endswith("/")}
        files = [p for p in listing if not p.endswith("/")]
        for rel in sorted(dirs) + files:
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            if rel in dirs:
                (staging / rel).mkdir(exist_ok=True)
        return Manifest(_manifest.copy_files(src, staging, files), dirs)

    def commit(self, storage_id: str, manifest: Manifest) -> None:
        final, staging = self._final(storage_id), self._staging(storage_id)
        if final.exists():
            raise errors.InternalException(f"checkpoint {storage_id} already exists at {final}")
        with open(staging / MANIFEST_NAME, "wb") as f:
            f.write(manifest.to_json(storage_id))
            f.flush()
            os.fsync(f.fileno())
        _manifest.fsync_dirs(staging)
        os.rename(staging, final)
        _manifest.fsync_dir(self._base_path)

    def abort(self, storage_id: str) -> None:
        self.discard_staging(storage_id)

    def discard_staging(self, storage_id: str) -> None:
        shutil.rmtree(self._staging(storage_id), ignore_errors=True)

    def _load(self, storage_id: str) -> tuple[pathlib.Path, Manifest | None]:
        final = self._final(storage_id)
        if not final.is_dir():
            if self._staging(storage_id).exists():
                raise errors.CheckpointIncomplete(
                    f"checkpoint {storage_id} was never committed: only its unfinished staging "
                    f"directory {self._staging(storage_id)} exists",
                    storage_id=storage_id,
                )
            raise errors.CheckpointNotFound(
                f"no checkpoint {storage_id} in {self._base_path}; check the storage id and that "
                "checkpoint_storage points at the storage the checkpoint was saved to"
            )
        manifest_path = final / MANIFEST_NAME
        if not manifest_path.exists():
            warn_unverified(storage_id, str(final))
            return final, None
        return final, Manifest.from_json(manifest_path.read_bytes(), storage_id)

    @contextlib.contextmanager
    def restore_path(
        self, storage_id: str, selector: Selector | None = None
    ) -> Iterator[pathlib.Path]:
        if selector is not None:
            logger.warning(
                f"{type(self).__name__} reads checkpoints in place; the selector is ignored"
            )
        path, manifest = self._load(storage_id)
        if manifest is not None:
            _manifest.verify_tree(storage_id, path, manifest)
        yield path

    def download(
        self, src: str, dst: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        path, manifest = self._load(src)
        if manifest is None:
            listing = _manifest.list_directory(path)
            manifest = Manifest.unhashed(listing)
            verify = False
        else:
            verify = True
        chosen = manifest.select(selector)
        dst = pathlib.Path(dst)
        dst.mkdir(parents=True, exist_ok=True)
        for rel in sorted(chosen.dirs):
            (dst / rel).mkdir(parents=True, exist_ok=True)

        def fetch(rel: str) -> _manifest.FileEntry | None:
            if not (path / rel).is_file():
                return None
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            return _manifest.copy_file(path / rel, dst / rel)

        got = _manifest.parallel(fetch, chosen.files)
        for rel in sorted(chosen.files):
            if verify:
                _manifest.check_file(src, rel, chosen.files[rel], got[rel])

    def put_files(self, src_dir: pathlib.Path, dst_prefix: str, files: Mapping[str, str]) -> None:
        for src, dst in files.items():
            rel = posixpath.normpath(posixpath.join(dst_prefix.strip("/"), dst))
            if rel == ".." or rel.startswith(("../", "/")):
                raise ValueError(f"{dst_prefix!r}/{dst!r} leaves the storage's base path")
            target = self._base_path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src_dir / src, target)

    def remove_files(self, storage_id: str, globs: Sequence[str]) -> dict[str, int]:
        final, manifest = self._load(storage_id)
        named = _globs.matcher(globs)
        listing = _manifest.list_directory(final)
        if not any(not rel.endswith("/") and not named(rel) for rel in listing):
            self.delete(storage_id)
            return {}
        if manifest is not None and globs:
            kept = manifest.select(lambda p: not named(p))
            tmp = final / f"{MANIFEST_NAME}.tmp"
            with open(tmp, "wb") as f:
                f.write(kept.to_json(storage_id))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final / MANIFEST_NAME)
            _manifest.fsync_dir(final)
        for rel in sorted(listing, reverse=True):  # contents before their directories
            if named(rel):
                target = final / rel
                if rel.endswith("/"):
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)
        return _manifest.list_directory(final)

    def delete(self, storage_id: str) -> None:
        final = self._final(storage_id)
        if not final.exists():
            logger.warning(
                f"checkpoint {storage_id} is not in {self._base_path}; nothing to delete"
            )
            return
        # Renamed away first, so a delete that fails halfway never leaves a partial checkpoint.
        doomed = self._base_path / f".{storage_id}.deleting"
        os.rename(final, doomed)
        shutil.rmtree(doomed)


class SharedFSStorageManager(DirectoryStorageManager):
    """``type: shared_fs``: a directory every node of the cluster mounts at the same place.
    Build it from a config with :func:`determined.common.storage.build`."""
