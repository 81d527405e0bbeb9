"""The group-commit writer's own CPU per metric report (issue #16, item 11), without HTTP or
other threads: what one commit of ``--batch`` training reports costs the writer thread.

Two ways to write the same batch to the same SQLite schema, in the same process, timed by the
thread's CPU clock (``time.thread_time``) over ``--rounds`` commits each, taking turns:

* **store**: ``ingest.write_reports`` in ``Store.tx`` (what the master's group commit runs:
  SQLAlchemy Core, ``ReportBatch``'s reads, one multi-row insert, one update per trial);
* **raw**: the floor under it: the same rows and trial updates through the ``sqlite3`` cursor
  (``executemany`` of prepared tuples, JSON and times encoded by hand), none of the reads.

The ratio store/raw says how much of the writer's CPU is the layers above SQLite, which is the
case for taking the hot insert past SQLAlchemy's per-row parameter processing. Commits are
fsynced in both (``synchronous=FULL``), but CPU time does not count the wait for the disk.

``--kept`` compares the store's way with itself: its trial rows read for each commit, against
kept from the commits before (``write_reports(..., known)``, as the write worker keeps them,
``determined/master/ingest/_write_worker.kept``), on two stores taking turns.

``--busy-loop`` times something else: the wall time of the store's commits while another
thread of the process keeps the GIL busy two thirds of the time (3 ms of Python, 1.5 ms asleep,
as the master's event loop under a stream of reports), at Python's default GIL switch interval
and at the master's (``determined/master/_interpreter_tuning.py``). The writer lets go of the
GIL in each SQLite call and waits to take it back; the ratio says what the shorter interval buys.

    .venv/bin/python benchmarks/report_batch.py                 # 27 reports x 400 commits
    .venv/bin/python benchmarks/report_batch.py --batch 100 --rounds 200
    .venv/bin/python benchmarks/report_batch.py --busy-loop
    .venv/bin/python benchmarks/report_batch.py --kept --batch 15
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

from determined.master._interpreter_tuning import SWITCH_INTERVAL_S
from determined.master.ingest import Report, ReportWrite, write_reports
from determined.master.store import Store, _experiments, _time, _trials, sqlite_url
from determined.master.store._enums import State

CONFIG = {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": True}}
WHEN = "2026-01-01T00:00:00Z"


def make_trials(store: Store, n: int) -> list[int]:
    ids = []
    with store.tx() as conn:
        for _ in range(n):
            exp = _experiments.insert_experiment(
                conn, config=CONFIG, original_config="", model_definition=None, owner_id=1
            )
            trial = _trials.insert_trial(
                conn, experiment_id=exp, request_id="r", hparams={}, seed=0, state=State.ACTIVE
            )
            _trials.update_trial(conn, trial, run_id=1)  # its first run, as once allocated
            ids.append(trial)
    return ids


def batch_of(ids: list[int], steps: dict[int, int], size: int, rng: random.Random) -> list[Any]:
    """``size`` training reports of distinct trials, each the next step of its trial."""
    out = []
    for trial_id in rng.sample(ids, size):
        steps[trial_id] += 1
        s = steps[trial_id]
        avg = {"loss": 1.0 / s, "lr": 0.1, "batches": s}
        report = Report(trial_id, "training", 1, s, avg, None, _time.parse(WHEN))
        out.append(ReportWrite(report))
    return out


def time_store(
    store: Store, batches: list[list[Any]], known: dict[int, Any] | None = None
) -> list[float]:
    per_report = []
    for writes in batches:
        start = time.thread_time()
        with store.tx() as conn:
            write_reports(conn, writes, known)
        per_report.append((time.thread_time() - start) / len(writes))
    return per_report


def kept(args: argparse.Namespace) -> int:
    """CPU per report with the trial rows read for each commit against kept between commits:
    two stores with the same trials and reports, taking turns 50 commits at a time."""
    rng = random.Random(0)
    results: dict[str, list[float]] = {"read": [], "kept": []}
    with tempfile.TemporaryDirectory() as tmp:
        stores, batches = {}, {}
        for way in results:
            (pathlib.Path(tmp) / way).mkdir()
            stores[way] = Store(sqlite_url(pathlib.Path(tmp) / way))
            ids = make_trials(stores[way], args.trials)
            steps = dict.fromkeys(ids, 0)
            batches[way] = [batch_of(ids, steps, args.batch, rng) for _ in range(args.rounds)]
        known: dict[int, Any] = {}  # the write worker's, kept for the whole run
        for i in range(0, args.rounds, 50):
            results["read"] += time_store(stores["read"], batches["read"][i : i + 50])
            results["kept"] += time_store(stores["kept"], batches["kept"][i : i + 50], known)
        for store in stores.values():
            store.close()
    print_ratio(results, args.batch, "kept", "read")
    return 0


def print_ratio(results: dict[str, list[float]], batch: int, top: str, bottom: str) -> None:
    """Each way's CPU per report (seconds per report of each commit), and their ratio."""
    for way, values in results.items():
        values.sort()
        print(
            f"{way:6} CPU per report: median {statistics.median(values) * 1e6:7.1f} us"
            f"  p90 {values[int(0.9 * len(values))] * 1e6:7.1f} us"
            f"  ({batch} reports x {len(values)} commits)"
        )
    ratio = statistics.median(results[top]) / statistics.median(results[bottom])
    print(f"ratio {top}/{bottom} (median): {ratio:.2f}x")


def time_raw(path: pathlib.Path, batches: list[list[Any]]) -> list[float]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    insert = (
        "INSERT INTO metrics (trial_id, trial_run_id, metric_group, partition, steps_completed,"
        " metrics, batch_metrics, report_time, archived) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)"
    )
    update = "UPDATE trials SET total_batches = ?, summary_metrics = ? WHERE id = ?"
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc).isoformat(sep=" ")
    per_report = []
    for writes in batches:
        start = time.thread_time()
        reports = [w.report for w in writes]
        rows = [
            (r.trial_id, 1, "training", "TRAINING", r.steps, json.dumps(r.avg), None, when)
            for r in reports
        ]
        summaries = [(r.steps, json.dumps({"avg_metrics": r.avg}), r.trial_id) for r in reports]
        db.execute("BEGIN IMMEDIATE")
        db.executemany(insert, rows)
        db.executemany(update, summaries)
        db.execute("COMMIT")
        per_report.append((time.thread_time() - start) / len(writes))
    db.close()
    return per_report


def _busy(stop: threading.Event) -> None:
    """Hold the GIL 3 ms, sleep 1.5 ms, until ``stop``: a busy event loop."""
    while not stop.is_set():
        end = time.perf_counter() + 0.003
        while time.perf_counter() < end:
            pass
        time.sleep(0.0015)


def busy_loop(args: argparse.Namespace) -> int:
    rng = random.Random(0)
    walls: dict[float, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(sqlite_url(pathlib.Path(tmp)))
        ids = make_trials(store, args.trials)
        steps = dict.fromkeys(ids, 0)
        default = sys.getswitchinterval()
        # Alternate the two intervals, so that a slow spell of the machine hits both alike.
        for i in range(2 * args.rounds // 50):
            interval = (default, SWITCH_INTERVAL_S)[i % 2]
            sys.setswitchinterval(interval)
            stop = threading.Event()
            busy = threading.Thread(target=_busy, args=(stop,), daemon=True)
            busy.start()
            for _ in range(50):
                writes = batch_of(ids, steps, args.batch, rng)
                start = time.perf_counter()
                with store.tx() as conn:
                    write_reports(conn, writes)
                walls.setdefault(interval, []).append(time.perf_counter() - start)
            stop.set()
            busy.join()
        sys.setswitchinterval(default)
        store.close()
    for interval, values in walls.items():
        values.sort()
        print(
            f"switch interval {interval * 1e3:.1f} ms: commit wall p50 "
            f"{statistics.median(values) * 1e3:6.2f} ms  p90 "
            f"{values[int(0.9 * len(values))] * 1e3:6.2f} ms  ({len(values)} commits of "
            f"{args.batch} reports beside a busy thread)"
        )
    ratio = statistics.median(walls[default]) / statistics.median(walls[SWITCH_INTERVAL_S])
    print(f"ratio default/master interval (median commit wall): {ratio:.2f}x")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--batch", type=int, default=27, help="reports per commit (the master's mean)")
    p.add_argument("--rounds", type=int, default=400, help="commits per way")
    p.add_argument(
        "--busy-loop",
        action="store_true",
        help="commit wall time beside a busy thread, at two GIL switch intervals",
    )
    p.add_argument(
        "--kept",
        action="store_true",
        help="trial rows read for each commit vs kept between commits (the write worker's way)",
    )
    args = p.parse_args()
    if args.busy_loop:
        return busy_loop(args)
    if args.kept:
        return kept(args)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        stores, batches = {}, {}
        for way in ("store", "raw"):
            data = pathlib.Path(tmp) / way
            data.mkdir()
            stores[way] = Store(sqlite_url(data))
            ids = make_trials(stores[way], args.trials)
            steps = dict.fromkeys(ids, 0)
            batches[way] = [batch_of(ids, steps, args.batch, rng) for _ in range(args.rounds)]
        stores["raw"].close()
        results: dict[str, list[float]] = {"store": [], "raw": []}
        # The two ways take turns, 50 commits at a time: a slow spell of the machine hits both.
        for i in range(0, args.rounds, 50):
            results["store"] += time_store(stores["store"], batches["store"][i : i + 50])
            results["raw"] += time_raw(
                pathlib.Path(tmp) / "raw" / "master.db", batches["raw"][i : i + 50]
            )
        stores["store"].close()
        print_ratio(results, args.batch, "store", "raw")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
