"""Log retention of trials (0.37's ``PUT .../retain_logs``): days an ended trial's logs are
kept, -1 forever; the master's ``retention_policy`` sweep drops them when due."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.api._models import _Body
from determined.master.api._services import services
from determined.master.store import _log_retention, _trials

router = APIRouter(prefix="/api/v1")


class RetainLogs(_Body):
    num_days: int


def _check_days(days: int) -> None:
    if not _log_retention.FOREVER <= days <= _log_retention.MAX_DAYS:
        raise InvalidArgument(
            f"numDays is {days}; it must be from -1 (keep forever) to {_log_retention.MAX_DAYS}"
        )


def _apply(request: Request, store: StoreDep, trial_ids: list[int], days: int) -> None:
    store.write(lambda conn: _log_retention.set_days(conn, trial_ids, days))
    services(request).log_retention.sweep()  # a shorter retention takes effect now


@router.put("/trials/{trial_id}/retain_logs")
def retain_trial_logs(
    trial_id: int, body: RetainLogs, caller: Caller, store: StoreDep, request: Request
) -> dict[str, Any]:
    _check_days(body.num_days)
    caller.check_trial_owner(store, trial_id, "change the log retention of")
    _apply(request, store, [trial_id], body.num_days)
    return {}


@router.put("/experiments/{experiment_id}/retain_logs")
def retain_experiment_logs(
    experiment_id: int, body: RetainLogs, caller: Caller, store: StoreDep, request: Request
) -> dict[str, Any]:
    """Every trial of the experiment, those it starts later excepted (as 0.37)."""
    _check_days(body.num_days)
    caller.check_owner(store, experiment_id, "change the log retention of")
    with store.read() as conn:
        ids = [int(t["id"]) for t in _trials.trials_of(conn, experiment_id)]
    _apply(request, store, ids, body.num_days)
    return {}
