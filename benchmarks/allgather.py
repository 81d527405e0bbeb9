"""Allgather round trip: DistributedContext.allgather vs torch.distributed.all_gather_object.

Both run in the same processes, on the same payloads, interleaved call by call so that machine
noise hits both alike. Prints the median time per call and the ratio ours/torch (goal <= 1.0).

    .venv/bin/python benchmarks/allgather.py            # 2 and 4 processes
    .venv/bin/python benchmarks/allgather.py --procs 2 --repeat 3
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import socket
import statistics
import time
from typing import Any

import numpy as np

MiB = 1 << 20
# name, payload factory, iterations
CASES: list[tuple[str, Any, int]] = [
    ("small dict", lambda r: {"rank": r, "loss": 0.5 * r, "path": f"/ckpt/{r}"}, 300),
    ("1 MiB bytes", lambda r: bytes([r]) * MiB, 60),
    ("16 MiB bytes", lambda r: bytes([r]) * (16 * MiB), 10),
    ("16 MiB ndarray", lambda r: np.full(4 * MiB, r, dtype=np.float32), 10),
]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _time(fn: Any, payload: Any) -> float:
    start = time.perf_counter()
    fn(payload)
    return time.perf_counter() - start


def _worker(rank: int, size: int, ports: list[int], out: Any) -> None:
    import torch.distributed as dist

    from determined.core._distributed import DistributedContext

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{ports[0]}",
        rank=rank,
        world_size=size,
        timeout=datetime.timedelta(seconds=120),
    )
    ours = DistributedContext(
        rank=rank,
        size=size,
        local_rank=rank,
        local_size=size,
        cross_rank=0,
        cross_size=1,
        pub_port=ports[1],
        pull_port=ports[2],
    )

    def torch_allgather(x: Any) -> list[Any]:
        got: list[Any] = [None] * size
        dist.all_gather_object(got, x)
        return got

    results = []
    for name, make, iters in CASES:
        payload = make(rank)
        for fn in (ours.allgather, torch_allgather):  # warm up both paths
            fn(payload)
        t_ours, t_torch = [], []
        for _ in range(iters):
            ours.broadcast(None)  # start each timed call together
            t_ours.append(_time(ours.allgather, payload))
            ours.broadcast(None)
            t_torch.append(_time(torch_allgather, payload))
        results.append((name, statistics.median(t_ours), statistics.median(t_torch)))
    if rank == 0:
        out.put(results)
    ours.close()
    dist.destroy_process_group()


def run(size: int) -> list[tuple[str, float, float]]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ports = _free_ports(3)
    procs = [ctx.Process(target=_worker, args=(r, size, ports, out)) for r in range(size)]
    for p in procs:
        p.start()
    results: list[tuple[str, float, float]] = out.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; medians reported")
    args = parser.parse_args()
    print(f"cpus={os.cpu_count()}  median seconds per allgather call")
    print(f"{'procs':>5}  {'payload':<16}{'ours':>11}{'torch':>11}{'ours/torch':>12}")
    for size in args.procs:
        runs = [run(size) for _ in range(args.repeat)]
        for i, (name, _, _) in enumerate(runs[0]):
            ours = statistics.median(r[i][1] for r in runs)
            torch_t = statistics.median(r[i][2] for r in runs)
            print(f"{size:>5}  {name:<16}{ours:>11.6f}{torch_t:>11.6f}{ours / torch_t:>12.2f}")


if __name__ == "__main__":
    main()
