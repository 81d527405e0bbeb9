"""Runs DistributedContext ranks in real processes for tests/core/test_distributed.py.

Processes come from a forkserver that has already imported this module and determined.core, so
starting one costs milliseconds. Each rank runs a module-level scenario function and sends back
either its result or the exception it raised (type name, message, seconds since start).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from determined.core._distributed import DistributedContext

_CTX = mp.get_context("forkserver")
# A process has one forkserver, and the first start fixes what it preloads. In a test run that
# is this one, so it also preloads for the other processes forked from it: the rank programs of
# test_checkpoint_shard with boto3's S3 client (_kit.checkpoint_scenarios), and the master's
# write workers started in-process (test_write_worker, test_report_batch), which would import
# the store and its writes again each (~0.3 to 0.5 s of CPU per process).
_CTX.set_forkserver_preload(
    [
        "_kit.dist_worker",
        "determined.core._distributed",
        "_kit.checkpoint_scenarios",
        "determined.master.ingest",
    ]
)

Scenario = Callable[[dict[str, Any], Any], Any]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def layout(size: int, local_size: int, **extra: Any) -> list[dict[str, Any]]:
    """Constructor kwargs for every rank: ``size // local_size`` fake nodes on this machine."""
    pub, pull = free_ports(2)
    cross_size = size // local_size
    base = {"pub_port": pub, "pull_port": pull, "timeout": 20, **extra}
    if cross_size > 1:
        base.setdefault("chief_ip", "127.0.0.1")
    return [
        dict(
            base,
            rank=r,
            size=size,
            local_rank=r % local_size,
            local_size=local_size,
            cross_rank=r // local_size,
            cross_size=cross_size,
        )
        for r in range(size)
    ]


class Failed:
    """What a rank raised, as seen by the test."""

    def __init__(self, kind: str, message: str, after: float) -> None:
        self.kind, self.message, self.after = kind, message, after

    def __repr__(self) -> str:
        return f"Failed({self.kind}: {self.message} after {self.after:.2f}s)"


def _child(fn: Scenario, kwargs: dict[str, Any], arg: Any, env: dict[str, str], q: Any) -> None:
    kwargs = dict(kwargs)
    os.environ.update(env)
    os.environ.update(kwargs.pop("_env", {}))  # per-rank environment
    tempfile.tempdir = None
    start = time.monotonic()
    try:
        q.put((kwargs.get("rank", 0), fn(kwargs, arg)))
    except BaseException as e:
        q.put((kwargs.get("rank", 0), Failed(type(e).__name__, str(e), time.monotonic() - start)))


def run(
    fn: Scenario,
    ranks: list[dict[str, Any]],
    arg: Any = None,
    env: dict[str, str] | None = None,
    timeout: float = 30,
) -> list[Any]:
    """Run ``fn(kwargs, arg)`` in one process per entry of ``ranks``; results in rank order.
    A rank that died without answering reads as ``Failed("died", ...)``."""
    q = _CTX.Queue()
    procs = [_CTX.Process(target=_child, args=(fn, kw, arg, env or {}, q)) for kw in ranks]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < len(procs):
            alive = [p for p in procs if p.is_alive()]
            try:
                rank, value = q.get(timeout=0.2)
                results[rank] = value
            except Exception:
                if not alive or time.monotonic() > deadline:
                    break
    finally:
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    return [results.get(kw["rank"], Failed("died", "no answer", 0)) for kw in ranks]


# Scenarios: module-level so that they pickle.


def collectives(kw: dict[str, Any], _: Any) -> dict[str, Any]:
    with DistributedContext(**kw) as d:
        r = d.get_rank()
        return {
            "allgather": d.allgather(("a", r)),
            "gather": d.gather(("g", r)),
            "broadcast": d.broadcast(("b", r)),
            "allgather_local": d.allgather_local(("al", r)),
            "gather_local": d.gather_local(("gl", r)),
            "broadcast_local": d.broadcast_local(("bl", r)),
            "getters": (d.get_rank(), d.get_size(), d.get_local_rank(), d.get_local_size())
            + (d.get_cross_rank(), d.get_cross_size(), d.get_num_agents()),
        }


def big_payload(kw: dict[str, Any], nbytes: int) -> list[tuple[int, int, int]]:
    """allgather ``nbytes`` of bytes and of ndarray; returns (len, first, last) of each."""
    with DistributedContext(**kw) as d:
        r = d.get_rank()
        blobs = d.allgather(bytes([r + 1]) * nbytes)
        arrays = d.allgather(np.full(nbytes // 8, r + 1, dtype=np.float64))
        return [(len(b), b[0], b[-1]) for b in blobs] + [
            (a.nbytes, int(a[0]), int(bool((a == a[0]).all()) and a.flags.writeable))
            for a in arrays
        ]


def own_entry_identity(kw: dict[str, Any], _: Any) -> bool:
    with DistributedContext(**kw) as d:
        mine = {"rank": d.get_rank()}
        return d.allgather(mine)[d.get_rank()] is mine


def from_env_factory(kw: dict[str, Any], factory: str) -> tuple[Any, ...]:
    with getattr(DistributedContext, factory)() as d:
        got = d.allgather(d.get_rank())
        return (d.get_cross_rank(), d.get_cross_size(), d.get_num_agents(), got)


def die_in_second_allgather(kw: dict[str, Any], victim: int) -> Any:
    d = DistributedContext(**kw)
    d.allgather(0)
    if d.get_rank() == victim:
        time.sleep(0.3)  # let the others block in the next collective first
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        d.allgather(1)
    except Exception as e:
        waited = time.monotonic() - start
        try:
            d.broadcast(None)
        except RuntimeError as again:
            return (type(e).__name__, str(e), waited, str(again))
        return (type(e).__name__, str(e), waited, "context still usable")
    return "no error"


def busy_chief(kw: dict[str, Any], seconds: float) -> Any:
    """The chief hogs the GIL in pure Python, longer than the heartbeat timeout."""
    with DistributedContext(**kw) as d:
        if d.get_rank() == 0:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
        return d.broadcast(d.get_rank())


def sleepy_worker(kw: dict[str, Any], seconds: float) -> Any:
    with DistributedContext(**kw) as d:
        if d.get_rank() == 1:
            time.sleep(seconds)
        return d.allgather(d.get_rank())


def mismatched(kw: dict[str, Any], _: Any) -> Any:
    d = DistributedContext(**kw)
    if d.get_rank() == 0:
        return d.broadcast("from chief")
    return d.allgather("from worker")


def construct_only(kw: dict[str, Any], _: Any) -> Any:
    DistributedContext(**kw).close()
    return "ok"


def tempdir_lifecycle(kw: dict[str, Any], _: Any) -> tuple[list[str], list[str]]:
    d = DistributedContext(**kw)
    during = sorted(n for n in os.listdir(tempfile.gettempdir()) if n.startswith("det-ipc-"))
    d.allgather_local(None)
    d.close()
    d.close()  # idempotent
    after = sorted(n for n in os.listdir(tempfile.gettempdir()) if n.startswith("det-ipc-"))
    return during, after


def _payload(rank: int, step: int, nbytes: int) -> tuple[int, int, bytes]:
    return (rank, step, bytes([rank]) * nbytes)


def serve_sequences(kw: dict[str, Any], commands: Any) -> str:
    """Stay up and run each op sequence that arrives on ``commands[rank]``; answers go to
    ``commands[-1]``. ``None`` stops."""
    with DistributedContext(**kw) as d:
        inbox, outbox = commands[d.get_rank()], commands[-1]
        while True:
            seq = inbox.get()
            if seq is None:
                return "stopped"
            out = [getattr(d, op)(_payload(d.get_rank(), i, n)) for i, (op, n) in enumerate(seq)]
            outbox.put((d.get_rank(), out))


def expected(op: str, rank: int, step: int, n: int, size: int, local_size: int) -> Any:
    node = rank // local_size
    local = [node * local_size + i for i in range(local_size)]
    if op == "allgather":
        return [_payload(r, step, n) for r in range(size)]
    if op == "gather":
        return [_payload(r, step, n) for r in range(size)] if rank == 0 else None
    if op == "broadcast":
        return _payload(0, step, n)
    if op == "allgather_local":
        return [_payload(r, step, n) for r in local]
    if op == "gather_local":
        return [_payload(r, step, n) for r in local] if rank == local[0] else None
    return _payload(local[0], step, n)  # broadcast_local


def make_queues(n: int) -> list[Any]:
    return [_CTX.Queue() for _ in range(n)]


def start(fn: Scenario, ranks: list[dict[str, Any]], arg: Any) -> tuple[list[Any], Any]:
    """Start ranks without waiting for them (for long-lived servers). Returns the processes and
    the queue their final results go to; keep the queue referenced while they run."""
    q = _CTX.Queue()
    procs = [_CTX.Process(target=_child, args=(fn, kw, arg, {}, q)) for kw in ranks]
    for p in procs:
        p.start()
    return procs, q


def _error(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except RuntimeError as e:
        return f"RuntimeError: {e}"
    return "no error"


def local_core_ranks(kw: dict[str, Any], _: Any) -> dict[str, Any]:
    """core.init() without a master on every rank: the chief's SIGTERM reaches every rank
    through should_preempt(); ChiefOnly modes refuse workers; the one local op is broadcast."""
    from determined import core

    out: dict[str, Any] = {}
    d = DistributedContext(**kw)
    with core.init(distributed=d, tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        rank = ctx.distributed.get_rank()
        out["before"] = ctx.preempt.should_preempt()
        if rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # the handler runs between bytecodes of the main thread
        out["after"] = [ctx.preempt.should_preempt() for _ in range(2)]
        ops = []
        for op in ctx.searcher.operations():
            ops.append(op.length)
            if rank == 0:
                op.report_completed(0.0)
            else:
                out["worker_report"] = _error(lambda op=op: op.report_completed(0.0))
        out["ops"] = ops
        if rank != 0:
            chief_only = core.SearcherMode.ChiefOnly
            out["searcher_chief_only"] = _error(lambda: next(ctx.searcher.operations(chief_only)))
    with core.init(
        distributed=DistributedContext(**kw),
        preempt_mode=core.PreemptMode.ChiefOnly,
        tensorboard_mode=core.TensorboardMode.MANUAL,
    ) as ctx:
        out["preempt_chief_only"] = _error(ctx.preempt.should_preempt)
    return out


def cluster_preempt_ranks(kw: dict[str, Any], mode: str) -> list[bool]:
    """A 2-slot trial (DET_* environment from the test) asking for preemption in ``mode``:
    the answers of a few should_preempt() calls, once the first True has been seen."""
    from determined import core

    d = DistributedContext(**kw)
    with core.init(distributed=d, preempt_mode=core.PreemptMode(mode)) as ctx:
        answers = [ctx.preempt.should_preempt()]
        deadline = time.monotonic() + 10
        while not answers[-1] and time.monotonic() < deadline:
            time.sleep(0.05)
            answers.append(ctx.preempt.should_preempt())
        answers.append(ctx.preempt.should_preempt())
        return answers[-2:]
