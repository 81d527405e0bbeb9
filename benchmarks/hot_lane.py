"""The master's event-loop CPU per metric report with the hot lane (``api/_hot.HotLane``,
served by ``_http_protocol``) and without it (the same report through the ASGI stack to
``api/_hot.HotRoutes``), in one process, taking turns (issue 37).

The master's application (``create_app`` on SQLite in a temporary directory, its writes in its
own group-commit thread) is served by uvicorn with the master's protocol in a thread of this
process; a client process sends the reports (each trial's one after the other, over its own
keep-alive connection, as fast as answers come). Each round runs the same load twice on fresh
trials and connections: once with the lane, once with ``hot_lane`` unset (a connection looks
for the lane when it opens). Counted: the CPU time of the server's event-loop thread (what the
lane cuts, and what one interpreter lock bounds at 8,000 reports a second) and of this whole
process (with the group-commit writer) per report. The ratio lane / no lane is printed per
round; the machine's other load moves both sides of a round alike.

    .venv/bin/python benchmarks/hot_lane.py                      # 3 rounds, 20 trials x 200
    .venv/bin/python benchmarks/hot_lane.py --rounds 5 --reports 500
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import master_metrics  # benchmarks/ is this script's directory, first on sys.path
import uvicorn

from determined.master._app import create_app
from determined.master._http_protocol import CoalescingHttpToolsProtocol
from determined.master.store import Store, sqlite_url


def _serve(app: Any) -> tuple[uvicorn.Server, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=CoalescingHttpToolsProtocol,
        access_log=False,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, name="server", daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    return server, port


def _loop_cpu(loop: asyncio.AbstractEventLoop) -> float:
    """The CPU seconds the server's event-loop thread has used."""

    async def read() -> float:
        return time.thread_time()

    return asyncio.run_coroutine_threadsafe(read(), loop).result()


def _phase(
    app: Any, lane: Any, loop: asyncio.AbstractEventLoop, port: int, trials: list[Any], n: int
) -> tuple[float, float]:
    """The loop thread's and the process's CPU seconds per report of one phase."""
    app.hot_lane = lane
    loop_before, process_before = _loop_cpu(loop), time.process_time()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        # 10,000 Hz: each report as soon as the one before it was answered.
        results, _ = pool.apply(
            master_metrics._client, ((port, trials, "metrics", 10_000.0, n, time.time() + 1.0),)
        )
    loop_cpu, process_cpu = _loop_cpu(loop) - loop_before, time.process_time() - process_before
    answered = sum(r["statuses"].get(200, 0) for r in results)
    sent = sum(len(r["latencies"]) for r in results)
    if answered != sent:
        raise RuntimeError(f"{sent - answered} of {sent} reports were not answered 200")
    return loop_cpu / answered, process_cpu / answered


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--trials", type=int, default=20, help="trials (connections) per phase")
    p.add_argument("--reports", type=int, default=200, help="reports of each trial per phase")
    args = p.parse_args()

    data_dir = pathlib.Path(tempfile.mkdtemp(prefix="hot-lane-"))
    store = Store(sqlite_url(data_dir))
    app = create_app(store, dev_endpoints=True)
    lane = app.hot_lane
    server, port = _serve(app)
    loop = server_loop(server)
    url = f"http://127.0.0.1:{port}"
    print(
        f"{args.rounds} rounds of {args.trials} trials x {args.reports} reports, with and "
        f"without the hot lane; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    _, trials = master_metrics.make_trials(url, 2 * args.rounds * args.trials + args.trials)
    # A first phase warms the token cache, the Host check and the interpreter.
    _phase(app, lane, loop, port, trials[: args.trials], 20)
    ratios, ratios_process = [], []
    for r in range(args.rounds):
        base = args.trials * (1 + 2 * r)
        with_lane = _phase(app, lane, loop, port, trials[base : base + args.trials], args.reports)
        rest = trials[base + args.trials : base + 2 * args.trials]
        without = _phase(app, None, loop, port, rest, args.reports)
        ratios.append(with_lane[0] / without[0])
        ratios_process.append(with_lane[1] / without[1])
        print(
            f"round {r + 1}: event-loop thread CPU per report {with_lane[0] * 1e6:.0f} us with "
            f"the lane, {without[0] * 1e6:.0f} us without ({ratios[-1]:.2f}x); whole process "
            f"{with_lane[1] * 1e6:.0f} us / {without[1] * 1e6:.0f} us ({ratios_process[-1]:.2f}x)"
            f"; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print(
        f"median ratio lane / no lane: event-loop thread {statistics.median(ratios):.2f}x, "
        f"whole process {statistics.median(ratios_process):.2f}x"
    )
    server.should_exit = True
    store.close()
    return 0


def server_loop(server: uvicorn.Server) -> asyncio.AbstractEventLoop:
    """The event loop the server thread runs (its servers know it)."""
    for s in server.servers:
        loop = s.get_loop()
        if loop is not None:
            return loop
    raise RuntimeError("the server runs no loop")


if __name__ == "__main__":
    sys.exit(main())
