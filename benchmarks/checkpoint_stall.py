"""Training-loop stall per checkpoint, synchronous vs asynchronous (issue #19 item 3).

A model of N MB of float32 parameters, on the CPU or a CUDA device (``--device``), is
checkpointed through the same calls PyTorchTrial makes (``determined.pytorch``: a
``HostStaging`` to stage, ``save_file`` to write, which is torch.save hashed as it is written,
into ``CheckpointContext.store_path`` on shared_fs: sha256 manifest, fsync, atomic rename):

* ``host copy``       a copy of every parameter into host buffers allocated once (pinned, with
                      asynchronous copies and one synchronize, from CUDA): the staging floor
* ``new host copy``   ``tensor.to("cpu", copy=True)`` of every parameter, into new memory
* ``plain write``     ``torch.save`` of the state (where it lives) into a plain file, then
                      fsync file and dir
* ``sync``            ``store_path`` + ``torch.save``: the loop is stalled for all of it
* ``async``           stage (``HostStaging.copy``, buffers kept between checkpoints) +
                      ``store_path_in_background``: the loop is stalled only until that
                      returns; the write is waited for separately

Prints, per size, median stall and total seconds, and the ratios against the goals:
async stall <= 1.2x the host copy, async throughput (bytes / total) >= 0.9x the plain write.
``os.sync()`` runs before each timed run; the order of the variants rotates by round; round 0
warms up (its async stall, which allocates the staging buffers, is printed as "first").

    PYTHONPATH=$PWD .venv/bin/python benchmarks/checkpoint_stall.py               # 100 MB
    PYTHONPATH=$PWD .venv/bin/python benchmarks/checkpoint_stall.py --sizes 100,1000
    python3 benchmarks/checkpoint_stall.py --device cuda --sizes 100,1000        # on a GPU
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from determined.common import storage
from determined.common.storage import _manifest
from determined.core._checkpoint import CheckpointContext, LocalCheckpointReporter
from determined.core._distributed import DistributedContext
from determined.pytorch._checkpoint_io import save_file
from determined.pytorch._staging import HostStaging

MB = 1_000_000
CHUNK = 16 * MB  # bytes per parameter tensor


def make_model(mb: int, device: torch.device) -> torch.nn.Module:
    n = mb * MB // 4
    sizes = [CHUNK // 4] * (n // (CHUNK // 4)) + ([n % (CHUNK // 4)] if n % (CHUNK // 4) else [])
    g = torch.Generator().manual_seed(0)
    model = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(s, generator=g)) for s in sizes)
    return model.to(device)


def _sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


Variant = Callable[[], tuple[float, float]]


def measure(
    mb: int, rounds: int, work: pathlib.Path, device: torch.device
) -> tuple[dict[str, dict[str, list[float]]], float]:
    """Per variant, the kept rounds' stall, total and CPU seconds; and the first (cold)
    asynchronous stall, which allocates the staging buffers."""
    model = make_model(mb, device)
    dist = DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )
    base = work / "ckpts"
    ckpt = CheckpointContext(dist, storage.SharedFSStorageManager(base), LocalCheckpointReporter())
    meta = {"steps_completed": 1}
    staging = HostStaging()
    pinned = device.type == "cuda"
    floor = [torch.empty_like(p, device="cpu", pin_memory=pinned) for p in model.parameters()]

    def state() -> dict[str, Any]:
        return {"models_state_dict": [model.state_dict()]}

    def timed(fn: Callable[[], object]) -> tuple[float, float]:
        _sync_device(device)
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        return dt, dt

    def host() -> tuple[float, float]:
        def copy() -> None:
            for buf, p in zip(floor, model.parameters(), strict=True):
                buf.copy_(p.detach(), non_blocking=pinned)
            _sync_device(device)

        return timed(copy)

    def new_host() -> tuple[float, float]:
        return timed(lambda: [p.detach().to("cpu", copy=True) for p in model.parameters()])

    def plain() -> tuple[float, float]:
        out = work / "plain"
        out.mkdir(exist_ok=True)

        def write() -> None:
            with open(out / "state_dict.pth", "wb") as f:
                torch.save(state(), f)
                f.flush()
                os.fsync(f.fileno())
            _manifest.fsync_dir(out)

        try:
            return timed(write)
        finally:
            shutil.rmtree(out)

    def sync() -> tuple[float, float]:
        ids: list[str] = []

        def write() -> None:
            with ckpt.store_path(meta) as (path, storage_id):
                save_file(state(), path / "state_dict.pth")
            ids.append(storage_id)

        try:
            return timed(write)
        finally:
            shutil.rmtree(base / ids[0])

    def background() -> tuple[float, float]:
        _sync_device(device)
        t0 = time.perf_counter()
        staged, release = staging.copy(state())

        def write(path: pathlib.Path) -> None:
            try:
                save_file(staged, path / "state_dict.pth")
            finally:
                release()

        ckpt.store_path_in_background(write, meta)
        stall = time.perf_counter() - t0
        storage_id = ckpt.wait_for_background()
        total = time.perf_counter() - t0
        assert storage_id is not None
        shutil.rmtree(base / storage_id)
        return stall, total

    variants: dict[str, Variant] = {
        "host copy": host,
        "new host copy": new_host,
        "plain write": plain,
        "sync": sync,
        "async": background,
    }
    names = list(variants)
    out: dict[str, dict[str, list[float]]] = {
        k: {"stall": [], "total": [], "cpu": []} for k in names
    }
    first = 0.0
    for r in range(rounds + 1):  # round 0 warms up and is not kept
        k = r % len(names)
        for name in names[k:] + names[:k]:
            os.sync()
            cpu0 = _cpu_seconds()
            stall, total = variants[name]()
            cpu = _cpu_seconds() - cpu0
            if r:
                out[name]["cpu"].append(cpu)
                out[name]["stall"].append(stall)
                out[name]["total"].append(total)
            elif name == "async":
                first = stall
    staging.close()
    return out, first


def _cpu_seconds() -> float:
    """User + system CPU time of this process, all threads: the work done, whatever else the
    machine is running (wall times on a shared machine mostly measure the neighbours)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def report(mb: int, times: dict[str, dict[str, list[float]]], first: float) -> None:
    med = {k: {m: statistics.median(v[m]) for m in v} for k, v in times.items()}
    print(f"\n== {mb} MB of parameters ({len(times['sync']['stall'])} rounds, medians) ==")
    print(f"{'variant':<14} {'stall s':>9} {'total s':>9} {'MB/s':>8} {'cpu s':>8}")
    for name, m in med.items():
        print(
            f"{name:<14} {m['stall']:>9.3f} {m['total']:>9.3f} {mb / m['total']:>8.0f} "
            f"{m['cpu']:>8.3f}"
        )
    host, plain = med["host copy"]["stall"], med["plain write"]["total"]
    new_host = med["new host copy"]["stall"]
    for name in ("sync", "async"):
        stall = med[name]["stall"] / host
        thru = plain / med[name]["total"]
        print(
            f"{name:<6} stall {stall:6.2f}x host copy (goal <= 1.2; "
            f"{med[name]['stall'] / new_host:.2f}x a copy into new memory)   "
            f"throughput {thru:5.2f}x plain write+fsync (goal >= 0.9)"
        )
    print(f"async  first stall (allocates the staging buffers) {first:.3f} s: {first / host:.2f}x")
    # The background part alone (after staging): what bounds how often one can checkpoint.
    behind = statistics.median(
        t - s for t, s in zip(times["async"]["total"], times["async"]["stall"], strict=True)
    )
    print(f"async  background write {behind:.3f} s: {plain / behind:5.2f}x plain write+fsync")
    for name in ("plain write", "async"):  # the spread behind the medians
        rounds = " ".join(f"{t:.3f}" for t in times[name]["total"])
        print(f"rounds {name} total s: {rounds}")
    cpu = med["plain write"]["cpu"]
    print(
        f"cpu    plain write {cpu:.3f} s; per checkpoint, sync "
        f"{med['sync']['cpu'] / cpu:4.2f}x and async {med['async']['cpu'] / cpu:4.2f}x that "
        "(async includes the host copy)"
    )


def _describe(device: torch.device) -> str:
    where = platform.processor() or platform.machine()
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"torch {torch.__version__}, {device} ({where}), {cpus} CPUs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100", help="comma-separated MB of parameters")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    ap.add_argument("--device", default="cpu", help="where the model lives: cpu, cuda, cuda:1")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: this torch sees no CUDA device")
    torch.set_num_threads(args.threads)
    print(_describe(device))
    for mb in (int(s) for s in args.sizes.split(",")):
        work = pathlib.Path(tempfile.mkdtemp(prefix="bench-ckpt-stall-", dir=args.dir))
        try:
            report(mb, *measure(mb, args.rounds, work, device))
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
