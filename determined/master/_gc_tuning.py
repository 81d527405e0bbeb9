"""The master's garbage-collector settings (its own process and its read workers')."""

from __future__ import annotations

import gc


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
