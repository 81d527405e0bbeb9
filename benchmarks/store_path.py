"""Checkpoint write throughput: ``CheckpointContext.store_path`` / ``upload`` on shared_fs
(files hashed with sha256, fsynced, manifest written, directory renamed) against plain writes
of the same bytes, in one process, interleaved run by run.

Variants (each writes the same ~500 MiB: a few large "tensor" files and many small ones):

* ``plain write``        open/write every file into a new directory (page cache only)
* ``plain write+fsync``  the same, then fsync every file and directory (a durable write)
* ``store_path``         the same writes inside ``checkpoint.store_path()``
* ``copytree``           ``shutil.copytree`` of a written directory
* ``copytree+fsync``     the same, then fsync every file and directory
* ``upload``             ``checkpoint.upload()`` of that directory (copy + hash + fsync)

Prints the median seconds and MiB/s of each, and throughput ratios (goal: ours >= 0.9x the
plain variant). ``os.sync()`` runs before every timed run so that no run pays for an earlier
one's writeback; a warm-up round is not timed, and the order of the variants rotates.

    .venv/bin/python benchmarks/store_path.py                 # 512 MiB, 9 rounds
    .venv/bin/python benchmarks/store_path.py --mib 128 --rounds 3 --dir /some/disk
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

from determined.common import storage
from determined.common.storage import _manifest
from determined.core._checkpoint import CheckpointContext, LocalCheckpointReporter
from determined.core._distributed import DistributedContext

MiB = 1 << 20


def make_payload(total_mib: int) -> dict[str, bytes]:
    """~90% in 8 large files, the rest in 64 small ones (optimizer shards, json, rng...)."""
    rng = np.random.default_rng(0)
    big = total_mib * MiB * 9 // 10 // 8
    small = (total_mib * MiB - 8 * big) // 64
    files = {f"model/layer{i}.pt": rng.bytes(big) for i in range(8)}
    files.update({f"optim/shard{i:02d}.bin": rng.bytes(small) for i in range(64)})
    return files


def write_files(root: pathlib.Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def fsync_tree(root: pathlib.Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    _manifest.fsync_dirs(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    args = ap.parse_args()

    files = make_payload(args.mib)
    nbytes = sum(len(b) for b in files.values())
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-store-path-", dir=args.dir))
    src = work / "src"
    write_files(src, files)
    base = work / "ckpts"
    dist = DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )
    ckpt = CheckpointContext(dist, storage.SharedFSStorageManager(base), LocalCheckpointReporter())
    counter = iter(range(10**9))

    def fresh() -> pathlib.Path:
        return work / f"out{next(counter)}"

    def plain() -> None:
        write_files(fresh(), files)

    def plain_fsync() -> None:
        out = fresh()
        write_files(out, files)
        fsync_tree(out)

    def store_path() -> None:
        with ckpt.store_path({"steps_completed": 1}) as (path, _):
            write_files(path, files)

    def copytree() -> None:
        shutil.copytree(src, fresh())

    def copytree_fsync() -> None:
        out = fresh()
        shutil.copytree(src, out)
        fsync_tree(out)

    def upload() -> None:
        ckpt.upload(src, {"steps_completed": 1})

    variants: dict[str, Callable[[], None]] = {
        "plain write": plain,
        "plain write+fsync": plain_fsync,
        "store_path": store_path,
        "copytree": copytree,
        "copytree+fsync": copytree_fsync,
        "upload": upload,
    }
    try:
        times = run_rounds(variants, work, src, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(times, nbytes, len(files), args.rounds)


def run_rounds(
    variants: dict[str, Callable[[], None]], work: pathlib.Path, src: pathlib.Path, rounds: int
) -> dict[str, list[float]]:
    """One untimed warm-up round, then ``rounds`` timed ones. The order of the variants rotates
    from round to round: on a VM the first large write after a large free can pay for faulting
    memory back in, and that must not always land on the same variant."""
    names = list(variants)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds + 1):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            os.sync()
            start = time.perf_counter()
            variants[name]()
            if r > 0:
                times[name].append(time.perf_counter() - start)
            for p in work.iterdir():  # keep the disk from filling up
                if p != src:
                    shutil.rmtree(p)
    return times


def report(times: dict[str, list[float]], nbytes: int, nfiles: int, rounds: int) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{nbytes / MiB:.0f} MiB in {nfiles} files, {rounds} rounds, {os.cpu_count()} CPUs")
    print(f"  {'variant':<18} {'median':>8} {'min':>7} {'max':>7}  {'MiB/s':>6}")
    for name, t in med.items():
        lo, hi = min(times[name]), max(times[name])
        print(f"  {name:<18} {t:7.3f}s {lo:6.3f}s {hi:6.3f}s  {nbytes / MiB / t:6.0f}")
    print("throughput ratios, ours / plain (goal >= 0.9): median of the per-round ratios")
    for ours, plain_name in [
        ("store_path", "plain write"),
        ("store_path", "plain write+fsync"),
        ("upload", "copytree"),
        ("upload", "copytree+fsync"),
    ]:
        ratios = [p / o for p, o in zip(times[plain_name], times[ours], strict=True)]
        print(
            f"  {ours} vs {plain_name:<18} {statistics.median(ratios):.2f}x"
            f"  (rounds: {min(ratios):.2f}x .. {max(ratios):.2f}x)"
        )


if __name__ == "__main__":
    main()
