"""The master's interpreter settings: the garbage collector's (its own process and its read
workers') and the GIL's switch interval (its own process, which its forked read workers inherit)."""

from __future__ import annotations

import gc
import sys

# Seconds a thread waiting for the GIL waits before it asks the holder to let go (Python's
# default: 0.005).
SWITCH_INTERVAL_S = 0.001


def tune_gc() -> None:
    """Python's cyclic GC, left as it is, pauses the master for a full collection of every
    object it holds (the imported FastAPI, pydantic and SQLAlchemy included; 50-150 ms) a few
    times a second under a steady stream of metric reports: those pauses were the master's
    slowest answers (benchmarks/master_metrics.py). What exists once the app is built lives as
    long as the process, so it is moved out of the collector's sight (``gc.freeze``), and
    young objects are collected less often (most die young without a collection: reference
    counting frees them)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)


def tune_gil() -> None:
    """The group-commit writer thread lets go of the GIL in every SQLite call and must take it
    back from the event loop, which under a stream of reports is rarely idle: each time, it
    waits up to the switch interval, a few times per commit, and every report of the batch waits
    with it. A shorter interval bounds those waits (``benchmarks/report_batch.py --busy-loop``:
    a commit beside a busy thread); the cost is more frequent switches between busy threads."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
