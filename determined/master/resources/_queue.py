"""The job queue's order, as 0.37's priority scheduler keeps it: a smaller
``resources.priority`` goes first (default 42), then the queue position (submission order,
unless ``aheadOf``/``behindOf`` moved a job). The resource managers start runnable trials in
this order; ``GET /api/v1/job-queues`` numbers jobs by it."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from determined.master.store import TrialRow, _experiments, _job_positions, _trials

DEFAULT_PRIORITY = 42


def priority_of(config: dict[str, Any]) -> int:
    """The experiment's scheduling priority (``resources.priority``; lower runs first)."""
    value = (config.get("resources") or {}).get("priority")
    return DEFAULT_PRIORITY if value is None else int(value)


def sort_key(config: dict[str, Any], moved: dict[int, float], experiment_id: int) -> Any:
    return (priority_of(config), _job_positions.position_of(moved, experiment_id), experiment_id)


def runnable_in_order(conn: sa.Connection) -> list[TrialRow]:
    """The trials that need a run now, highest-priority job first, then queue position."""
    runnable = _trials.runnable_trials(conn)
    moved = _job_positions.positions(conn)
    keys: dict[int, Any] = {}
    for trial in runnable:
        exp_id = int(trial["experiment_id"])
        if exp_id not in keys:
            exp = _experiments.require_experiment(conn, exp_id)
            keys[exp_id] = sort_key(exp["config"] or {}, moved, exp_id)
    return sorted(runnable, key=lambda t: (keys[int(t["experiment_id"])], int(t["id"])))
