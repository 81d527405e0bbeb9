"""The checkpoint manifest: every file's relative path, size and sha256, stored as
``.det_manifest.json`` at the root of a committed checkpoint.

Its presence marks a checkpoint as complete. Readers verify the files they read against it and
raise :class:`determined.errors.CheckpointCorrupted` (wrong size or hash) or
:class:`determined.errors.CheckpointIncomplete` (a listed file is missing), naming the file.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import mmap
import os
import pathlib
import shutil
import threading
import types
from collections.abc import Callable, Collection, Iterable
from typing import Any

from determined import errors

MANIFEST_NAME = ".det_manifest.json"
FORMAT = 1
_CHUNK = 8 << 20
# Hashing releases the GIL, so a few threads overlap hashing one file with fsync of another.
_THREADS = 4
# Writes at least this big to a HashedFile are hashed on a second thread while they are written,
# when the process may run on two CPUs or more: the kernel's copy into the page cache and the
# hash then run side by side (1 GB on 2 cores: 0.59 s instead of 0.98 s, medians of 7). With one
# CPU the hand-offs would only add cost.
_OVERLAP = 1 << 20
# Every this many bytes, a HashedFile asks the kernel to start writing what it has so far to
# disk, without waiting (posix_fadvise DONTNEED, which on Linux starts writeback of the range
# and drops its pages once clean): the commit's fsync then waits only for the tail instead of
# the whole file, and a checkpoint does not fill the page cache. os.write of 16 MB blocks + fsync
# on 2 cores, medians of 10: 1 GB 0.31-0.35 s instead of 0.53-0.70 s, 100 MB 0.04 s instead of
# 0.06 s; kicks every 32 or 64 MB gained less. benchmarks/checkpoint_stall.py shows the effect
# on whole checkpoints.
_WRITEBACK = 16 << 20


def _overlap_hashing() -> bool:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return cpus >= 2


@dataclasses.dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclasses.dataclass
class Manifest:
    """Files (relative posix path -> entry) and directories (relative path ending in ``/``)."""

    files: dict[str, FileEntry] = dataclasses.field(default_factory=dict)
    dirs: set[str] = dataclasses.field(default_factory=set)

    def update(self, other: Manifest) -> None:
        self.files.update(other.files)
        self.dirs.update(other.dirs)

    def resources(self) -> dict[str, int]:
        """The reference's resource map: files with sizes, directories (``a/``) with 0."""
        out = {d: 0 for d in self.dirs}
        out.update({p: e.size for p, e in self.files.items()})
        return dict(sorted(out.items()))

    def to_json(self, storage_id: str) -> bytes:
        doc = {
            "format": FORMAT,
            "storage_id": storage_id,
            "files": {
                p: {"size": e.size, "sha256": e.sha256} for p, e in sorted(self.files.items())
            },
            "dirs": sorted(self.dirs),
        }
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, storage_id: str) -> Manifest:
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"unknown manifest format {doc.get('format')!r}")
            files = {
                str(p): FileEntry(int(e["size"]), str(e["sha256"])) for p, e in doc["files"].items()
            }
            return cls(files, {str(d) for d in doc.get("dirs", [])})
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise errors.CheckpointCorrupted(
                f"checkpoint {storage_id}: its manifest {MANIFEST_NAME} is unreadable ({e}); "
                "the checkpoint cannot be verified, so it is not used",
                storage_id=storage_id,
                path=MANIFEST_NAME,
            ) from e

    @classmethod
    def unhashed(cls, listing: dict[str, int]) -> Manifest:
        """A checkpoint without a manifest (an older one) as its listing (``list_directory``'s
        shape) gives it: sizes, no hashes, so nothing is verified against it."""
        return cls(
            {p: FileEntry(s, "") for p, s in listing.items() if not p.endswith("/")},
            {p for p in listing if p.endswith("/")},
        )

    def select(self, selector: Callable[[str], bool] | None) -> Manifest:
        if selector is None:
            return Manifest(dict(self.files), set(self.dirs))
        return Manifest(
            {p: e for p, e in self.files.items() if selector(p)},
            {d for d in self.dirs if selector(d)},
        )


def list_directory(root: str | os.PathLike[str]) -> dict[str, int]:
    """Relative path -> size of everything under ``root``; directories end in ``/`` with size 0.
    The manifest itself is left out: it describes the checkpoint, it is not part of it."""
    root = os.fspath(root)
    out: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        for d in dirnames:
            out[prefix + d + "/"] = 0
        for f in filenames:
            if prefix or f != MANIFEST_NAME:
                out[prefix + f] = os.path.getsize(os.path.join(dirpath, f))
    return dict(sorted(out.items()))


def hash_file(path: str | os.PathLike[str], *, fsync: bool = False) -> FileEntry:
    """sha256 and size of one file. With ``fsync`` (a file this process has just written and
    owns) it is also flushed to disk, and hashed through a memory mapping, which skips a copy
    per byte; files that others might truncate meanwhile are read normally, because a mapping
    of a shrinking file faults instead of raising."""
    if fsync:
        entry = _hash_owned(path)
        fsync_file(path)
        return entry
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        size = 0
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return FileEntry(size, h.hexdigest())


# Entries of files a HashedFile wrote, by real path, with the stat that shows they are unchanged.
_written: dict[str, tuple[tuple[int, ...], FileEntry]] = {}
_written_lock = threading.Lock()
_WRITTEN_MAX = 1024


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing ``length`` bytes of ``fd`` from ``offset`` to disk, without waiting (a
    hint: where the call is missing or fails, the commit's fsync does all of it)."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None:
        return
    with contextlib.suppress(OSError):  # only a hint
        fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class HashedFile:
    """A new file, written through ``write`` (as ``torch.save(obj, f)`` does), that is hashed as
    it is written: a large write is hashed on a second thread while this one writes it, so a
    checkpoint costs one pass over its bytes instead of a write and then a read.

    On close the entry is remembered; :func:`hash_tree` with ``fsync`` uses it instead of
    reading the file again, but only while the file's device, inode, size, mtime and ctime are
    those seen at close (a later write changes them, and the file is then hashed anew; one
    the timestamps' granularity hides still fails verification when the checkpoint is read,
    loudly, as a corrupted file).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.realpath(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(self.path, flags, 0o666)
        self._sha = hashlib.sha256()
        self._size = 0
        self._written_back = 0  # bytes before this offset were handed to writeback
        self._hasher: concurrent.futures.ThreadPoolExecutor | None = None
        self._overlap = _overlap_hashing()
        self.entry: FileEntry | None = None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        if n < _OVERLAP or not self._overlap:
            self._sha.update(view)
            self._write_all(view)
        else:
            if self._hasher is None:
                self._hasher = concurrent.futures.ThreadPoolExecutor(1, "det-ckpt-hash")
            # The caller's buffer is only valid during this call: wait for the hash before
            # returning (hashlib releases the GIL for large updates, os.write too).
            hashed = self._hasher.submit(self._sha.update, view)
            try:
                self._write_all(view)
            finally:
                hashed.result()
        self._size += n
        if self._size - self._written_back >= _WRITEBACK:
            _start_writeback(self._fd, self._written_back, self._size - self._written_back)
            self._written_back = self._size
        return n

    def _write_all(self, view: memoryview) -> None:
        while view:
            view = view[os.write(self._fd, view) :]

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        pass  # unbuffered: every write went straight to the file

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> FileEntry | None:
        if self._fd < 0:
            return self.entry
        if self._hasher is not None:
            self._hasher.shutdown()
        try:
            key = _stat_key(os.fstat(self._fd))
        finally:
            os.close(self._fd)
            self._fd = -1
        self.entry = FileEntry(self._size, self._sha.hexdigest())
        with _written_lock:
            _written[self.path] = (key, self.entry)
            # Entries nobody asks for (files a storage manager hashes its own way, or another
            # process commits) must not pile up over a long run: drop the oldest.
            while len(_written) > _WRITTEN_MAX:
                del _written[next(iter(_written))]
        return self.entry

    def __enter__(self) -> HashedFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.close()
        if exc is not None:
            with _written_lock:
                _written.pop(self.path, None)


def _written_entry(path: str | os.PathLike[str]) -> FileEntry | None:
    """The entry a HashedFile recorded for ``path`` if the file is unchanged since (once)."""
    real = os.path.realpath(path)
    with _written_lock:
        known = _written.pop(real, None)
    if known is None:
        return None
    try:
        key = _stat_key(os.stat(real))
    except OSError:
        return None
    return known[1] if key == known[0] else None


def _hash_owned(path: str | os.PathLike[str]) -> FileEntry:
    """sha256 and size of a file this process owns: the entry a HashedFile recorded when it
    wrote it, if it is unchanged since, or else read through a memory mapping."""
    known = _written_entry(path)
    if known is not None:
        return known
    return _hash_mapped(path)


def _hash_mapped(path: str | os.PathLike[str]) -> FileEntry:
    """sha256 and size of a file read through a memory mapping (no copy per byte)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                h.update(m)
    return FileEntry(size, h.hexdigest())


def fsync_file(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> FileEntry:
    """Copy ``src`` to ``dst`` (in the kernel where it can), then hash and fsync ``dst``: the
    hash is of the bytes that were written."""
    shutil.copyfile(src, dst)
    return hash_file(dst, fsync=True)


def parallel(fn: Callable[[str], Any], items: Iterable[str]) -> dict[str, Any]:
    """``{item: fn(item)}``, run on a few threads; the first exception propagates."""
    items = list(items)
    if len(items) <= 1:
        return {i: fn(i) for i in items}
    with concurrent.futures.ThreadPoolExecutor(min(_THREADS, len(items))) as pool:
        futures = {i: pool.submit(fn, i) for i in items}
        return {i: f.result() for i, f in futures.items()}


def hash_tree(
    root: str | os.PathLike[str], paths: Collection[str] | None = None, *, fsync: bool = False
) -> Manifest:
    """Manifest of the files under ``root`` (only ``paths`` when given, as relative paths from
    :func:`list_directory`). With ``fsync`` (files this process wrote and owns) every file is
    also flushed to disk, and hashed through a memory mapping."""
    listing = list_directory(root)
    if paths is not None:
        wanted = set(paths)
        listing = {p: s for p, s in listing.items() if p in wanted}
    dirs = {p for p in listing if p.endswith("/")}
    files = [p for p in listing if not p.endswith("/")]
    if not fsync:
        return Manifest(parallel(lambda p: hash_file(os.path.join(root, p)), files), dirs)
    # Flushing and hashing run side by side: the disk writes every file back while the CPUs
    # hash them from the page cache, instead of each flush starting only after its own hash.
    with concurrent.futures.ThreadPoolExecutor(_THREADS) as flushers:
        flushed = [flushers.submit(fsync_file, os.path.join(root, p)) for p in files]
        entries = parallel(lambda p: _hash_owned(os.path.join(root, p)), files)
        for f in flushed:
            f.result()
    return Manifest(entries, dirs)


def copy_files(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], files: Collection[str]
) -> dict[str, FileEntry]:
    """Copy each relative path of ``files`` from ``src`` to ``dst`` (whose directories exist),
    fsync the copies, and return their entries: hashes of the bytes that were written. Each
    copy's flush starts as soon as it is copied, beside the hashing of the others."""
    with concurrent.futures.ThreadPoolExecutor(_THREADS) as flushers:
        flushed: list[concurrent.futures.Future[None]] = []

        def one(rel: str) -> FileEntry:
            target = os.path.join(dst, rel)
            shutil.copyfile(os.path.join(src, rel), target)
            flushed.append(flushers.submit(fsync_file, target))
            return _hash_mapped(target)

        entries = parallel(one, files)
        for f in flushed:
            f.result()
    return entries


def fsync_dirs(root: str | os.PathLike[str]) -> None:
    """fsync every directory under ``root`` (and ``root``), so new entries survive a crash."""
    for dirpath, _, _ in os.walk(root):
        fsync_dir(dirpath)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_file(storage_id: str, rel: str, want: FileEntry, got: FileEntry | None) -> None:
    """Raise the named error if ``got`` (None: missing) does not match the manifest entry."""
    if got is None:
        raise errors.CheckpointIncomplete(
            f"checkpoint {storage_id} is incomplete: {rel!r} is listed in its manifest but is "
            "missing from storage; restore from another checkpoint",
            storage_id=storage_id,
            path=rel,
        )
    if got.size != want.size:
        raise errors.CheckpointCorrupted(
            f"checkpoint {storage_id} is corrupted: {rel!r} has {got.size} bytes but its manifest "
            f"says {want.size}; restore from another checkpoint",
            storage_id=storage_id,
            path=rel,
        )
    if got.sha256 != want.sha256:
        raise errors.CheckpointCorrupted(
            f"checkpoint {storage_id} is corrupted: the sha256 of {rel!r} is {got.sha256}, but "
            f"its manifest says {want.sha256}; restore from another checkpoint",
            storage_id=storage_id,
            path=rel,
        )


def verify_tree(storage_id: str, root: str | os.PathLike[str], manifest: Manifest) -> None:
    """Check every file of ``manifest`` under ``root``; raise on the first bad one (sorted)."""

    def one(rel: str) -> FileEntry | None:
        path = pathlib.Path(root, rel)
        if not path.is_file():
            return None
        if path.stat().st_size != manifest.files[rel].size:
            return FileEntry(path.stat().st_size, "")  # no need to hash a wrong-sized file
        return hash_file(path)

    got = parallel(one, manifest.files)
    for rel in sorted(manifest.files):
        check_file(storage_id, rel, manifest.files[rel], got[rel])
