"""Metric ingestion of one master on SQLite (or ``--db-url``'s database): N simulated trials
each posting a training report ``POST /api/v1/trials/{id}/metrics`` at H Hz for S seconds, with
their own allocation tokens.

The master is a real ``python -m determined.master`` process on 127.0.0.1 (``--resource-manager
none --dev-endpoints``, a fresh data dir, SQLite in WAL mode with ``synchronous=FULL``). Each
trial is an experiment of its own, allocated through the dev endpoint as the resource manager
would. Trials are driven by a few client processes, each an asyncio loop over raw keep-alive
HTTP/1.1 connections (one per trial), so the client stays cheap next to the master.

Each trial sends its reports one after the other (as a trial's Core API does), on a fixed
schedule: report k is due at ``start + offset + k / H``; a late answer delays the next report,
never drops it. ``--phase spread`` (the default) gives trial i the offset i / (N * H), so the
N independent trials' reports arrive evenly, as they do from trials that started at different
times; ``--phase aligned`` gives every trial offset 0, so all N reports arrive at once, H times
a second (the worst case, and the schedule of this benchmark's first version).

While the metric run goes, ``--readers`` (20) concurrent readers, in a process of their own,
each ask in turn for a page of the experiment list (``limit=100``), one experiment, one trial's
training metrics (the web UI's chart: ``/trials/time-series`` of ``loss``, up to 200 points)
and the last 20 of one trial's log lines (``logs?tail=20``; every trial gets ``--log-lines``
lines first), waiting ``--reader-pause`` seconds between answers: a room of people with
dashboards and ``det`` open on a busy cluster. Each also asks, in turn, for ``det e list``'s
first page (200 experiments), the web UI's experiment list (its first page: the 100 newest
unarchived experiments) and ``/stream``'s initial sync (every experiment of the default project
and one experiment's trials, from the websocket's connect to the sync's end).

``--seed-trials N`` first gives the master a large cluster's history: N trials in experiments of
``--seed-per-experiment`` (10) trials each (a grid search, created through the API), each with
``--seed-points`` (100) training reports and a validation every tenth step, written straight
into the database as the store's batched report path writes them. The readers then read those
(the logs tail reads the reporting trials). ``--postgres`` runs the master on a private
PostgreSQL server started for the run (fsync on). Printed:

* the **baseline**: the same trials, schedule and client, but ``GET /info`` (a no-op endpoint)
  instead of the metric post, for ``--baseline-seconds``: what the HTTP layer alone sustains;
* the **metric run**: reports accepted per second (sent / wall time of the schedule), the
  latency p50 / p99 / max of one post (send to answer), how far behind schedule the trials
  fell, and the ratios of rate and latency to the baseline;
* **inside** the master (its ``GET /api/v1/dev/group-commit``, over the metric run): how long
  a report's write waited from its submission to the end of its commit, each commit's wall
  time and the writer thread's CPU in it, and the commits' sizes: the store's share of the
  latency, without the HTTP layer and the client processes;
* the master's **CPU per request** of each phase (user + system time of the master process
  and its worker processes, from ``/proc``, over the requests answered): what a request
  costs, less sensitive to the other jobs on the machine than the rate; for the metric run
  by process (the master's own, its write worker, its read workers) and the benchmark's own
  client processes' (they share the machine's cores: they are part of the measurement);
* **reads alone** (``--read-seconds``, before the metric run): the readers without the
  writers, their latency by kind and the CPU per read of each process;
* the **readers**: latency p50 / p99 / max of all reads and of each kind;
* **nothing lost**: every post answered 200, and for each trial the rows the master committed
  (read from its database after the run) and ``summaryMetrics.avg_metrics.loss.count`` (read
  through the API) equal the reports sent.

    .venv/bin/python benchmarks/master_metrics.py                        # 200 x 10 Hz x 60 s
    .venv/bin/python benchmarks/master_metrics.py --trials 20 --seconds 5
    .venv/bin/python benchmarks/master_metrics.py --trials 50 --seconds 10 --profile /tmp/m.prof
    .venv/bin/python benchmarks/master_metrics.py --db-url postgresql://postgres@/bench?host=/tmp
    .venv/bin/python benchmarks/master_metrics.py --postgres --trials 600   # 6,000/s
    .venv/bin/python benchmarks/master_metrics.py --trials 200 --seed-trials 10000

``--no-write-worker`` starts the master with ``--no-write-worker``: its group commit then
writes the reports in the master's process (compare the two for what the write worker buys;
the inside line's writer CPU is then the writer thread's, not the worker's).

``--read-workers N`` starts the master with that many read worker processes (default: the
master's own default, 2; 0 answers the readers in the master's process, as before #16's last
change: compare the two for what the workers buy).

``--profile PATH`` runs the master under cProfile (every thread, CPU time per thread) and writes
the merged stats to PATH when it exits; the figures are then slower than without it. A thread
still waiting when the stats are taken shows a bogus ``acquire`` time (its wait, timed against
another thread's CPU clock): ignore ``{method 'acquire' ...}`` under ``Condition.wait``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import requests
import sqlalchemy as sa

REPO = pathlib.Path(__file__).resolve().parents[1]

CONFIG = """
name: bench
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 100000}
hyperparameters: {lr: 0.1}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# The master under cProfile: one profiler per thread (the event loop's and every worker's),
# timed by that thread's CPU clock, merged into one stats file when the master exits.
_PROFILED_MASTER = """
import cProfile, pstats, runpy, signal, sys, threading, time
out, sys.argv = sys.argv[1], ["determined.master", *sys.argv[2:]]
# uvicorn re-raises SIGTERM after its shutdown, with the handler it found: make that an exit.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
profiles = []
def start(*_):
    sys.setprofile(None)
    p = cProfile.Profile(time.thread_time)
    profiles.append(p)
    p.enable()
threading.setprofile(start)
start()
try:
    runpy.run_module("determined.master", run_name="__main__")
except SystemExit:
    pass
finally:
    stats = pstats.Stats(profiles[0])
    for p in profiles[1:]:
        stats.add(p)
    stats.dump_stats(out)
"""


def start_master(
    data_dir: pathlib.Path,
    profile: str | None = None,
    db_url: str | None = None,
    master_args: list[str] | None = None,
    tree: pathlib.Path = REPO,
) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "determined.master"]
    if profile:
        cmd = [sys.executable, "-c", _PROFILED_MASTER, os.path.abspath(profile)]
    cmd += ["--port", str(port)]
    cmd += ["--data-dir", str(data_dir), "--dev-endpoints", "--resource-manager", "none"]
    if db_url:
        cmd += ["--db-url", db_url]
    cmd += master_args or []
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(tree)
    env["DET_HOME"] = str(data_dir)
    log = open(data_dir / "master.log", "ab")  # noqa: SIM115 - lives as long as the master
    # In ``tree``: ``-m`` puts the working directory ahead of PYTHONPATH.
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tree)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"master exited: {(data_dir / 'master.log').read_text()}")
        try:
            if requests.get(url + "/info", timeout=1).ok:
                return proc, url
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise RuntimeError("master did not answer /info in 60 s")


def make_trials(url: str, n: int) -> tuple[str, list[dict[str, Any]]]:
    """``n`` experiments of one trial each, every trial allocated: [{id, runId, token}]."""
    s = requests.Session()
    r = s.post(url + "/api/v1/auth/login", json={"username": "admin", "password": ""})
    r.raise_for_status()
    admin = r.json()["token"]
    s.headers["Authorization"] = f"Bearer {admin}"
    out = []
    for _ in range(n):
        r = s.post(url + "/api/v1/experiments", json={"config": CONFIG})
        r.raise_for_status()
        exp_id = r.json()["experiment"]["id"]
        trials = s.get(url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
        trial_id = int(trials[0]["id"])
        body = s.post(url + f"/api/v1/dev/trials/{trial_id}/allocate", json={}).json()
        out.append(
            {
                "id": trial_id,
                "experiment": exp_id,
                "task": body["taskId"],
                "runId": int(body["runId"]),
                "token": body["token"],
            }
        )
    return admin, out


SEED_CONFIG = """
name: seeded
entrypoint: python3 train.py
searcher: {{name: grid, metric: loss, max_length: 100000, max_concurrent_trials: {per}}}
hyperparameters: {{lr: {{type: categorical, vals: {vals}}}}}
"""


def seed(url: str, admin: str, db_url: str, n: int, per: int, points: int) -> list[dict[str, Any]]:
    """``n`` trials in ``n / per`` experiments (a grid of ``per`` points each), created through
    the API as ``det e create`` would, then ``points`` training reports (and a validation every
    tenth) of each, written straight into the database as the master stores reports (rows and
    the trials' summaries): a large cluster's history in seconds. [{id, experiment}] of each."""
    import concurrent.futures

    config = SEED_CONFIG.format(per=per, vals=list(range(per)))
    headers = {"Authorization": f"Bearer {admin}"}

    def create(_: int) -> list[dict[str, Any]]:
        s = requests.Session()
        s.headers.update(headers)
        r = s.post(url + "/api/v1/experiments", json={"config": config})
        r.raise_for_status()
        exp_id = r.json()["experiment"]["id"]
        trials = s.get(url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
        return [{"id": int(t["id"]), "experiment": exp_id} for t in trials]

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        seeded = [t for ts in pool.map(create, range(max(1, n // per))) for t in ts]
    created = time.monotonic() - started
    _write_history(db_url, [t["id"] for t in seeded], points)
    print(
        f"seeded {len(seeded)} trials in {max(1, n // per)} experiments ({created:.0f} s), "
        f"{points} training points each ({time.monotonic() - started - created:.0f} s)",
        flush=True,
    )
    return seeded


def _write_history(db_url: str, trial_ids: list[int], points: int) -> None:
    """``points`` training rows and a validation every tenth step for each trial, and its
    summaries, best and latest validation, as the store's batched report path writes them
    (``_metrics.ReportBatch``)."""
    from determined.master.store import _metrics, make_engine
    from determined.master.store import _schema as schema
    from determined.master.store._enums import Partition

    engine = make_engine(db_url)
    TRAINING, VALIDATION = Partition.of("training"), Partition.of("validation")  # noqa: N806
    columns = ("summary_metrics", "total_batches")
    now = datetime.datetime.now(datetime.timezone.utc)
    for start in range(0, len(trial_ids), 100):  # short transactions beside the master's
        rows, updates = [], []
        for trial_id in trial_ids[start : start + 100]:
            trial: Any = {"id": trial_id, "run_id": 1}
            training: dict[str, Any] = {}
            validation: dict[str, Any] = {}
            for step in range(1, points + 1):
                avg = {"loss": 1.0 / step, "lr": 0.1, "batches": step}
                rows.append(_metrics._new_row(trial, "training", TRAINING, step, avg, None, now))
                _metrics.add_to_summary(training, avg)
                if step % 10 == 0:
                    val = {"loss": 1.1 / step, "accuracy": 1.0 - 1.0 / step}
                    row = _metrics._new_row(trial, "validation", VALIDATION, step, val, None, now)
                    rows.append(row)
                    _metrics.add_to_summary(validation, val)
            summary = {"avg_metrics": training, "validation_metrics": validation}
            updates.append({"trial_row_id": trial_id, columns[0]: summary, columns[1]: points})
        with engine.begin() as conn:
            _metrics._INSERT_MANY.run(conn, rows)  # the batch's own multi-row insert
            _metrics._update_trials_many(columns).run(conn, updates)
            # The newest validation is also the best (loss falls), as reports would set both.
            ids = [u["trial_row_id"] for u in updates]
            newest = (
                sa.select(sa.func.max(schema.metrics.c.id))
                .where(schema.metrics.c.trial_id == schema.trials.c.id)
                .where(schema.metrics.c.partition == VALIDATION.value)
                .scalar_subquery()
            )
            conn.execute(
                schema.trials.update()
                .where(schema.trials.c.id.in_(ids))
                .values(best_validation_id=newest, latest_validation_id=newest)
            )
    engine.dispose()


def add_logs(url: str, trials: list[dict[str, Any]], lines: int) -> None:
    """``lines`` log lines for each trial, posted by the trial as its log shipper does."""
    for t in trials:
        s = requests.Session()
        s.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {t['token']}"
        for start in range(0, lines, 1000):
            logs = [
                {"taskId": t["task"], "log": f"step {i}: loss {1.0 / (i + 1):.6f}\n"}
                for i in range(start, min(lines, start + 1000))
            ]
            s.post(url + "/api/v1/task/logs", json={"logs": logs}).raise_for_status()


# ----------------------------------------------------------------------------- client side


class Conn:
    """One keep-alive HTTP/1.1 connection for a reader's GETs; a request is bytes out, status
    and body back. One that the master closed meanwhile (idle past its keep-alive timeout,
    while this reader waited for a stream's sync) is opened again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        for _ in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            assert self.reader is not None
            self.writer.write(head + body)
            status_line = await self.reader.readline()
            if status_line:
                return await self._answer(int(status_line.split()[1]))
            self.writer.close()  # closed by the master: once more, on a new connection
            self.reader = self.writer = None
        raise ConnectionError("the master closed two connections in a row")

    async def _answer(self, status: int) -> tuple[int, bytes]:
        assert self.reader is not None
        length, chunked = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, await self.reader.readexactly(length)
        parts = []
        while True:  # a streamed answer (NDJSON): chunks until the empty one
            size = int((await self.reader.readline()).split(b";")[0], 16)
            parts.append(await self.reader.readexactly(size + 2))
            if size == 0:
                return status, b"".join(p[:-2] for p in parts)


# A training report, as the trial's client sends it (floats as json.dumps writes them).
_BODY = (
    '{"group": "training", "metrics": {"trialId": %d, "trialRunId": %d, "stepsCompleted": %d, '
    '"metrics": {"avgMetrics": {"loss": %r, "lr": 0.1, "batches": %d}}}}'
)


def _metric_body(trial: dict[str, Any], step: int) -> bytes:
    return (_BODY % (trial["id"], trial["runId"], step, 1.0 / step, step)).encode()


class TrialClient(asyncio.Protocol):
    """One trial on its keep-alive connection: report k goes out at ``t0 + offset + k / hz``
    (on the loop's clock), or as soon as report k-1 is answered if that is later; an answer (a
    head and Content-Length bytes of body: the master answers reports so) is cut from what
    arrives as it arrives. Callbacks only, no task or future per report: the benchmark's
    clients share the machine's cores with the master, they are part of the measurement, so
    they stay cheap. ``finished`` gets the trial's results."""

    def __init__(
        self, trial: dict[str, Any], port: int, mode: str, hz: float, count: int, t0: float
    ) -> None:
        self.trial, self.mode, self.hz, self.count = trial, mode, hz, count
        self.loop = asyncio.get_running_loop()
        self.t0 = t0 + trial.get("offset", 0.0)  # on the loop's clock
        self.finished: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.info = f"GET /info HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        self.head = (
            f"POST /api/v1/trials/{trial['id']}/metrics HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Grpc-Metadata-x-allocation-token: Bearer {trial['token']}\r\n"
            "Content-Length: %d\r\n\r\n"
        ).encode()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.k = 0
        self.started = 0.0
        self.latencies: list[float] = []
        self.sent_at: list[float] = []  # each report's send, in seconds since the schedule's start
        self.statuses: dict[int, int] = {}
        self.behind = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def _next(self) -> None:
        if self.k == self.count:
            assert self.transport is not None
            self.transport.close()
            self.finished.set_result(
                {
                    "id": self.trial["id"],
                    "latencies": self.latencies,
                    "sent_at": self.sent_at,
                    "statuses": self.statuses,
                    "behind": self.behind,
                }
            )
            return
        due = self.t0 + self.k / self.hz
        now = self.loop.time()
        if due > now:
            self.loop.call_at(due, self._send)
        else:
            self.behind = max(self.behind, now - due)
            self._send()

    def _send(self) -> None:
        if self.mode == "info":
            data = self.info
        else:
            body = _metric_body(self.trial, self.k + 1)
            data = self.head % len(body) + body
        self.started = time.monotonic()
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            self._fail(RuntimeError(f"an answer without a length: {head!r}"))
            return
        length = int(head[at + 17 :].split(b"\r\n", 1)[0])
        if len(self.buffer) < end + 4 + length:
            return
        answered = time.monotonic()
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        self.latencies.append(answered - self.started)
        self.sent_at.append(self.started - self.t0 + self.trial.get("offset", 0.0))
        status = int(head[9:12])
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status != 200 and self.statuses[status] == 1:
            print(f"trial {self.trial['id']}: HTTP {status}: {body[:300]!r}", file=sys.stderr)
        self.k += 1
        self._next()

    def _fail(self, error: BaseException) -> None:
        if not self.finished.done():
            self.finished.set_exception(error)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self._fail(ConnectionError(f"the master closed the connection: {exc}"))


# What a reader asks, in turn: a page of the experiment list, one experiment, one trial's
# training metrics (the web UI's chart: up to 200 points), the last 20 lines of one trial's logs,
# ``det e list`` (its first page: 200 of the caller's unarchived experiments), the web UI's first
# page (its experiment list: the 100 newest unarchived experiments, as list.js asks for them) and
# ``/stream``'s initial sync (every experiment of the default project and one experiment's
# trials, from connect to its sync).
READS = ("list", "describe", "metrics", "logs-tail", "det-e-list", "webui-list", "stream")


def _read_path(kind: str, trial: dict[str, Any]) -> str:
    if kind == "list":
        return "/api/v1/experiments?limit=100"
    if kind == "describe":
        return f"/api/v1/experiments/{trial['experiment']}"
    if kind == "metrics":
        return (
            f"/api/v1/trials/time-series?trialIds={trial['id']}"
            "&metricType=METRIC_TYPE_TRAINING&metricNames=loss&maxDatapoints=200"
        )
    if kind == "det-e-list":
        return "/api/v1/experiments?offset=0&archived=false&limit=200&users=admin"
    if kind == "webui-list":
        return "/api/v1/experiments?limit=100&offset=0&orderBy=ORDER_BY_DESC&archived=false"
    return f"/api/v1/trials/{trial['id']}/logs?tail=20"


def _stream_sync(port: int, admin: str, experiment_id: int) -> None:
    """One ``/stream`` connection's initial sync, as the web UI's would (then closed)."""
    import websocket

    # Without websocket-client's UTF-8 check, pure Python per byte: three quarters of this
    # client's CPU (~60 ms a sync of 1,000 experiments, 3x the master's), on the shared cores.
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/stream",
        header=[f"Authorization: Bearer {admin}"],
        timeout=120,
        skip_utf8_validation=True,
    )
    try:
        subscribe = {
            "experiments": {"project_ids": [1]},
            "trials": {"experiment_ids": [experiment_id]},
        }
        ws.send(json.dumps({"sync_id": "bench", "known": {}, "subscribe": subscribe}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("sync_id") == "bench" and msg.get("complete") is True:
                return
    finally:
        ws.close()


async def _drive_reader(
    port: int,
    admin: str,
    targets: dict[str, list[dict[str, Any]]],
    seed: int,
    pause: float,
    delay: float,
    until: float,
) -> dict[str, list[float]]:
    """One reader: after ``delay`` s, the READS in turn, each as soon as the last answered
    plus ``pause``, until ``until`` (monotonic). ``targets``: the trials whose experiment,
    metrics and stream to read (``read``) and whose logs to read (``logs``)."""
    conn = Conn(port)
    latencies: dict[str, list[float]] = {k: [] for k in READS}
    await asyncio.sleep(delay)
    k = seed
    while time.monotonic() < until:
        kind = READS[k % len(READS)]
        among = targets["logs" if kind == "logs-tail" else "read"]
        trial = among[(k * 7919) % len(among)]
        start = time.monotonic()
        if kind == "stream":
            await asyncio.to_thread(_stream_sync, port, admin, trial["experiment"])
            latencies[kind].append(time.monotonic() - start)
        else:
            head = (
                f"GET {_read_path(kind, trial)} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {admin}\r\n\r\n"
            ).encode()
            status, answer = await conn.request(head, b"")
            latencies[kind].append(time.monotonic() - start)
            if status != 200:
                raise RuntimeError(f"reader: {kind}: HTTP {status}: {answer[:300]!r}")
        k += 1
        await asyncio.sleep(pause)
    if conn.writer is not None:
        conn.writer.close()
    return latencies


def _readers(
    args: tuple[int, str, dict[str, list[dict[str, Any]]], int, float, float, float],
) -> Any:
    """The readers' process: ``(latencies of each reader, this process's CPU seconds)``."""
    port, admin, targets, n, pause, t0_wall, seconds = args

    async def main() -> Any:
        start = time.monotonic() + (t0_wall - time.time())
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        # Readers start spread over one pause, as people do, not all in the same instant.
        return await asyncio.gather(
            *(
                _drive_reader(port, admin, targets, i, pause, i * pause / n, start + seconds)
                for i in range(n)
            )
        )

    cpu = time.process_time()
    latencies = asyncio.run(main())
    return latencies, time.process_time() - cpu


def _client(args: tuple[int, list[dict[str, Any]], str, float, int, float]) -> Any:
    """A client process: ``(each trial's results, this process's CPU seconds)``."""
    port, trials, mode, hz, count, t0_wall = args

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        # t0 is shared as wall time; each trial's schedule runs on this loop's clock.
        t0 = loop.time() + (t0_wall - time.time())
        clients = []
        for t in trials:
            _, client = await loop.create_connection(
                lambda t=t: TrialClient(t, port, mode, hz, count, t0), "127.0.0.1", port
            )
            clients.append(client)
        return list(await asyncio.gather(*(c.finished for c in clients)))

    cpu = time.process_time()
    loop = _new_loop()
    try:
        results = loop.run_until_complete(main())
    finally:
        loop.close()
    return results, time.process_time() - cpu


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (the master's own), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def drive(
    port: int,
    trials: list[dict[str, Any]],
    mode: str,
    hz: float,
    seconds: float,
    procs: int,
    phase: str = "spread",
    readers: int = 0,
    reader_pause: float = 1.0,
    admin: str = "",
    read_targets: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    count = max(1, round(hz * seconds))
    # spread: trial i starts i / (N * H) s late, so reports arrive evenly (independent trials);
    # aligned: every trial reports at the same instants (the worst case: N at once).
    step = 1.0 / (len(trials) * hz) if phase == "spread" else 0.0
    trials = [{**t, "offset": i * step} for i, t in enumerate(trials)]
    t0 = time.time() + 1.0  # every client process starts the schedule together
    chunks = [trials[i::procs] for i in range(procs) if trials[i::procs]]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(len(chunks)) as pool, ctx.Pool(1) as reader_pool:
        reading = None
        if readers:
            targets = {"read": read_targets or trials, "logs": trials}
            reader_args = (port, admin, targets, readers, reader_pause, t0, seconds)
            reading = reader_pool.apply_async(_readers, (reader_args,))
        begin = time.time()
        parts = pool.map(_client, [(port, c, mode, hz, count, t0) for c in chunks])
        end = time.time()
        reads, reader_cpu = reading.get() if reading is not None else ([], 0.0)
    results = [r for part, _ in parts for r in part]
    lat = sorted(x for r in results for x in r["latencies"])
    windows: dict[int, list[float]] = {}
    for r in results:
        for at, x in zip(r["sent_at"], r["latencies"], strict=True):
            windows.setdefault(int(at // WINDOW_S), []).append(x)
    statuses: dict[int, int] = {}
    for r in results:
        for code, n in r["statuses"].items():
            statuses[code] = statuses.get(code, 0) + n
    wall = end - max(begin, t0)
    return {
        "sent": len(lat),
        "statuses": statuses,
        "wall": wall,
        "rate": statuses.get(200, 0) / wall,
        "p50": statistics.median(lat),
        "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "max": lat[-1],
        "behind": max(r["behind"] for r in results),
        "per_trial": {r["id"]: r["statuses"].get(200, 0) for r in results},
        "windows": {w: sorted(xs) for w, xs in sorted(windows.items())},
        "reads": {k: sorted(x for r in reads for x in r[k]) for k in READS} if reads else {},
        "client_cpu": sum(cpu for _, cpu in parts),
        "reader_cpu": reader_cpu,
    }


def cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU time the process ``pid`` and each of its descendants (the master's read
    and write workers, and a fork server's children) have used so far, by pid (Linux)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        times[child] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    tree, frontier = {pid}, [pid]
    while frontier:
        frontier = [c for c, p in parents.items() if p in frontier and c not in tree]
        tree.update(frontier)
    return {p: times.get(p, 0.0) for p in tree}


def drive_measured(pid: int, *args: Any) -> dict[str, Any]:
    """``drive``, plus ``cpu``: the CPU seconds of the master's processes per request
    answered 200, and ``cpu_by_pid``: the same for each process."""
    before = cpu_seconds(pid)
    result = drive(*args)
    after = cpu_seconds(pid)
    answered = max(1, result["statuses"].get(200, 0))
    result["cpu_by_pid"] = {p: (t - before.get(p, 0.0)) / answered for p, t in after.items()}
    result["cpu"] = sum(result["cpu_by_pid"].values())
    result["client_cpu"] /= answered
    return result


def read_alone(
    pid: int,
    port: int,
    admin: str,
    targets: dict[str, list[dict[str, Any]]],
    readers: int,
    pause: float,
    seconds: float,
) -> dict[str, Any]:
    """The readers alone for ``seconds``: their latencies by kind (``reads``), and the CPU
    seconds per read of each of the master's processes (``cpu_by_pid``) and of the readers'
    process (``reader_cpu``)."""
    ctx = multiprocessing.get_context("spawn")
    before = cpu_seconds(pid)
    with ctx.Pool(1) as pool:
        args = (port, admin, targets, readers, pause, time.time() + 1.0, seconds)
        lat, reader_cpu = pool.apply(_readers, (args,))
    after = cpu_seconds(pid)
    reads = {k: sorted(x for r in lat for x in r[k]) for k in READS}
    count = max(1, sum(len(v) for v in reads.values()))
    return {
        "reads": reads,
        "count": count,
        "cpu_by_pid": {p: (t - before.get(p, 0.0)) / count for p, t in after.items()},
        "reader_cpu": reader_cpu / count,
    }


def cpu_roles(r: dict[str, Any], master: int, write_worker: int | None) -> str:
    """``cpu_by_pid`` of a run as the master's process, its write worker and the rest (its
    read workers), and the benchmark's own client processes where the run has them."""
    by_pid = r["cpu_by_pid"]
    own = by_pid.get(master, 0.0)
    worker = by_pid.get(write_worker, 0.0) if write_worker else 0.0
    rest = sum(by_pid.values()) - own - worker
    line = f"master {own * 1e3:.3f}, write worker {worker * 1e3:.3f}, read workers {rest * 1e3:.3f}"
    if "client_cpu" in r:
        line += f"; benchmark's clients {r['client_cpu'] * 1e3:.3f}"
    return line


def _print_reads(reads: dict[str, list[float]], indent: str = "  ") -> None:
    for kind, lat in reads.items():
        if lat:
            print(
                f"{indent}{kind:<10} {len(lat):>6} reads  p50 {_pct(lat, 0.5):7.1f} ms  "
                f"p99 {_pct(lat, 0.99):7.1f} ms  max {lat[-1] * 1e3:7.1f} ms"
            )


def _write_worker_pid(url: str, admin: str) -> int | None:
    return group_commit(url, admin).get("writeWorkerPid")


def group_commit(url: str, admin: str, reset: bool = False) -> dict[str, Any]:
    """The master's own figures of its group commit (``GET /api/v1/dev/group-commit``); with
    ``reset``, forget them instead (the measured phase starts)."""
    headers = {"Authorization": f"Bearer {admin}"}
    if reset:
        requests.post(url + "/api/v1/dev/group-commit/reset", headers=headers).raise_for_status()
        return {}
    r = requests.get(url + "/api/v1/dev/group-commit", headers=headers)
    r.raise_for_status()
    return dict(r.json())


def _spread(p: dict[str, float]) -> str:
    return f"p50 {p.get('p50', 0):.1f} p99 {p.get('p99', 0):.1f} ms"


# ----------------------------------------------------------------------------- checks


def stored_counts(url: str, admin: str, db_url: str, trial_ids: list[int]) -> Any:
    """Per trial: live training rows in the master's database, and the API's summary count."""
    from determined.master.store import _metrics, make_engine

    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = {t: len(_metrics.list_rows(conn, t, "training")) for t in trial_ids}
    engine.dispose()
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {admin}"
    summary = {}
    for t in trial_ids:
        trial = s.get(url + f"/api/v1/trials/{t}").json()["trial"]
        loss = (trial["summaryMetrics"] or {}).get("avg_metrics", {}).get("loss", {})
        summary[t] = int(loss.get("count", 0))
    return rows, summary


# The metric run's latency is also printed by window of this many seconds: a tail from the
# run's first seconds (trials' first reports) reads differently from one spread over the run.
WINDOW_S = 5


def _windows(windows: dict[int, list[float]]) -> str:
    """Report latency p99 / max (ms) in each WINDOW_S window of the metric run."""
    parts = [
        f"{w * WINDOW_S}-{(w + 1) * WINDOW_S}s {_pct(xs, 0.99):.0f}/{xs[-1] * 1e3:.0f}"
        for w, xs in windows.items()
    ]
    return "  by window (p99/max ms): " + ", ".join(parts)


def _pct(sorted_seconds: list[float], q: float) -> float:
    """The q-quantile of sorted latencies, in ms."""
    return sorted_seconds[min(len(sorted_seconds) - 1, int(q * len(sorted_seconds)))] * 1e3


def _line(name: str, r: dict[str, Any]) -> str:
    return (
        f"{name:<10} sent {r['sent']:>7}  ok/s {r['rate']:>8.1f}  "
        f"p50 {r['p50'] * 1e3:7.2f} ms  p99 {r['p99'] * 1e3:8.2f} ms  "
        f"max {r['max'] * 1e3:8.1f} ms  behind schedule {r['behind']:6.2f} s  "
        f"master CPU {r['cpu'] * 1e3:.2f} ms/request  statuses {r['statuses']}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--baseline-seconds", type=float, default=10.0)
    p.add_argument("--procs", type=int, default=2, help="client processes")
    p.add_argument(
        "--phase",
        choices=("spread", "aligned"),
        default="spread",
        help="spread: the trials' reports evenly spaced in time (independent trials); "
        "aligned: all trials report at the same instants (bursts of N)",
    )
    p.add_argument(
        "--readers",
        type=int,
        default=20,
        help="concurrent readers during the metric run (0: none); each asks for "
        f"{', '.join(READS)} in turn",
    )
    p.add_argument(
        "--reader-pause", type=float, default=1.0, help="seconds a reader waits between reads"
    )
    p.add_argument(
        "--log-lines", type=int, default=2000, help="log lines of each trial before the run"
    )
    p.add_argument(
        "--write-worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the master's --write-worker / --no-write-worker (default: on, as the master)",
    )
    p.add_argument("--keep", action="store_true", help="keep the master's data dir")
    p.add_argument("--profile", metavar="PATH", help="cProfile the master into PATH (pstats)")
    p.add_argument(
        "--db-url",
        metavar="URL",
        help="an empty database for the master (e.g. postgresql://postgres@/bench?host=/tmp); "
        "default: SQLite in a fresh data dir",
    )
    p.add_argument(
        "--master-tree",
        type=pathlib.Path,
        default=REPO,
        help="run the master from this checkout (an older commit's worktree: the same load "
        "against old and new code; default: this one)",
    )
    p.add_argument(
        "--postgres",
        action="store_true",
        help="the master on a private PostgreSQL server started for the run (fsync on; "
        "Debian's postgresql package, as tests/_kit/postgres.py finds it)",
    )
    p.add_argument(
        "--read-workers",
        type=int,
        default=None,
        help="the master's --read-workers (default: the master's own default)",
    )
    p.add_argument(
        "--seed-trials",
        type=int,
        default=0,
        help="trials of a large cluster's history before the run (readers read them): created "
        "through the API, with their metric history written into the database",
    )
    p.add_argument(
        "--seed-per-experiment", type=int, default=10, help="seeded trials per experiment"
    )
    p.add_argument(
        "--seed-points",
        type=int,
        default=100,
        help="training reports of each seeded trial (and a validation every tenth step)",
    )
    p.add_argument(
        "--read-seconds",
        type=float,
        default=5.0,
        help="seconds of the readers alone before the metric run (their CPU per read)",
    )
    args = p.parse_args()

    data_dir = pathlib.Path(tempfile.mkdtemp(prefix="master-metrics-"))
    from determined.master.store import sqlite_url

    server = None
    if args.postgres:
        sys.path.insert(0, str(REPO / "tests"))
        from _kit.postgres import PostgresServer

        server = PostgresServer(durable=True)
        server.start()
        args.db_url = server.new_database()
    try:
        return _run(args, data_dir, args.db_url or sqlite_url(data_dir))
    finally:
        if server is not None:
            server.stop()


def _run(args: argparse.Namespace, data_dir: pathlib.Path, db_url: str) -> int:
    master_args = [] if args.read_workers is None else ["--read-workers", str(args.read_workers)]
    if not args.write_worker:
        master_args.append("--no-write-worker")
    proc, url = start_master(data_dir, args.profile, args.db_url, master_args, args.master_tree)
    try:
        port = int(url.rsplit(":", 1)[1])
        admin, trials = make_trials(url, args.trials)
        target = args.trials * args.hz
        print(
            f"{args.trials} trials x {args.hz:g} Hz x {args.seconds:g} s (target {target:.0f}/s), "
            f"phase {args.phase}, {args.procs} client processes, {os.cpu_count()} cores, master on "
            f"{sa.make_url(db_url).render_as_string()}, from {args.master_tree}; load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        base = drive_measured(
            proc.pid, port, trials, "info", args.hz, args.baseline_seconds, args.procs, args.phase
        )
        print(_line("GET /info", base))
        seeded = None
        if args.seed_trials:
            seeded = seed(
                url, admin, db_url, args.seed_trials, args.seed_per_experiment, args.seed_points
            )
        if args.readers:
            add_logs(url, trials, args.log_lines)
        if args.readers and args.read_seconds > 0:
            targets = {"read": seeded or trials, "logs": trials}
            alone = read_alone(
                proc.pid, port, admin, targets, args.readers, args.reader_pause, args.read_seconds
            )
            print(
                f"reads alone {alone['count']} reads in {args.read_seconds:g} s; CPU ms per read "
                f"by process: {cpu_roles(alone, proc.pid, _write_worker_pid(url, admin))}; "
                f"benchmark's readers {alone['reader_cpu'] * 1e3:.3f}"
            )
            _print_reads(alone["reads"])
        # Flushed: a profiler attached to the master (py-spy) can start on this line.
        print(f"metric run: {args.seconds:g} s", flush=True)
        group_commit(url, admin, reset=True)
        run = drive_measured(
            proc.pid,
            port,
            trials,
            "metrics",
            args.hz,
            args.seconds,
            args.procs,
            args.phase,
            args.readers,
            args.reader_pause,
            admin,
            seeded,
        )
        print(_line("metrics", run))
        print(_windows(run["windows"]))
        inside = group_commit(url, admin)
        print(
            f"CPU ms per report by process: "
            f"{cpu_roles(run, proc.pid, inside.get('writeWorkerPid'))}"
        )
        print(
            f"inside     {inside['writes']} writes, {inside['commits']} commits: wait (submit -> "
            f"committed) {_spread(inside['waitMs'])}; commit wall {_spread(inside['commitWallMs'])}"
            f", writer CPU {_spread(inside['commitCpuMs'])}; batch p50 "
            f"{inside['batchSize'].get('p50', 0):.0f} p99 {inside['batchSize'].get('p99', 0):.0f}"
        )
        every = sorted(x for lat in run["reads"].values() for x in lat)
        if every:  # (a run shorter than the readers' start has none)
            print(
                f"readers    {args.readers} readers ({args.reader_pause:g} s between reads), "
                f"{len(every)} reads: p50 {_pct(every, 0.5):.1f} ms  p99 {_pct(every, 0.99):.1f} "
                f"ms  max {every[-1] * 1e3:.1f} ms; the readers' process "
                f"{run['reader_cpu'] * 1e3 / len(every):.3f} ms CPU per read"
            )
            _print_reads(run["reads"])
        print(
            f"ratio metrics/baseline: rate {run['rate'] / base['rate']:.3f}x, "
            f"p50 {run['p50'] / base['p50']:.2f}x, p99 {run['p99'] / base['p99']:.2f}x; "
            f"sustained {run['rate']:.0f} of {target:.0f} reports/s "
            f"({run['rate'] / target:.1%} of target); load average now {os.getloadavg()[0]:.1f}"
        )
        rows, summary = stored_counts(url, admin, db_url, [t["id"] for t in trials])
        sent = run["per_trial"]
        lost = {
            t: (sent[t], rows[t], summary[t]) for t in sent if not sent[t] == rows[t] == summary[t]
        }
        total_rows = sum(rows.values())
        print(
            f"stored: {total_rows} rows for {sum(sent.values())} accepted reports "
            f"({run['sent']} sent); per-trial mismatches (sent, rows, summary count): "
            f"{lost or 'none'}"
        )
        ok = not lost and run["statuses"] == {200: run["sent"]}
        print("NOTHING LOST" if ok else "LOSS OR ERRORS")
        return 0 if ok else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        if not args.keep:
            import shutil

            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
