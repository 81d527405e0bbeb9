"""Trials to report metrics to, straight in a store (no master): the report-batch and
write-worker tests."""

from __future__ import annotations

from typing import Any

from determined.master.ingest import Report, ReportWrite
from determined.master.store import Store, _experiments, _time, _trials
from determined.master.store._enums import State

CONFIG = {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": True}}
WHEN = "2026-01-01T00:00:00Z"  # a fixed report time: two stores' rows compare equal


def example_trials(store: Store) -> list[int]:
    """Three trials: two in their first run, one in its second (reports roll back)."""
    ids = []
    with store.tx() as conn:
        for run_id in (1, 1, 2):
            exp = _experiments.insert_experiment(
                conn, config=CONFIG, original_config="", model_definition=None, owner_id=1
            )
            trial = _trials.insert_trial(
                conn,
                experiment_id=exp,
                request_id="r",
                hparams={},
                seed=0,
                state=State.ACTIVE,
            )
            _trials.update_trial(conn, trial, run_id=run_id)
            ids.append(trial)
    return ids


def training_report(trial_id: int, steps: int, avg: dict[str, Any]) -> ReportWrite:
    """The write of one training report of a trial in its first run."""
    return ReportWrite(Report(trial_id, "training", 1, steps, avg, None, _time.parse(WHEN)))
