"""Listing checkpoints of a trial or an experiment, sorted, filtered and paged as the
reference's SDK asks (``list_checkpoints(sort_by, order_by, max_results)``, ``det e lc``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends, Query

from determined.master import experiment
from determined.master._errors import InvalidArgument
from determined.master.api import _wire
from determined.master.api._auth import Caller
from determined.master.api._deps import Limit, StoreDep
from determined.master.api._responses import CheckpointsAnswer
from determined.master.api._wire import checkpoint_json
from determined.master.store import _checkpoints, _experiments, _trials

router = APIRouter(prefix="/api/v1")

_ATTRS = {
    "SORT_BY_UUID": lambda c: c["uuid"],
    "SORT_BY_TRIAL_ID": lambda c: c["training"]["trialId"],
    "SORT_BY_BATCH_NUMBER": lambda c: (c["metadata"] or {}).get("steps_completed"),
    "SORT_BY_END_TIME": lambda c: c["reportTime"],
    "SORT_BY_STATE": lambda c: c["state"],
    "SORT_BY_SEARCHER_METRIC": lambda c: c["training"]["searcherMetric"],
}


def _number_or_none(value: Any) -> Any:
    if isinstance(value, bool):
        return None
    return value


def select(
    rows: list[dict[str, Any]],
    *,
    smaller_is_better: bool,
    sort_by_attr: str = "SORT_BY_UNSPECIFIED",
    sort_by_metric: str = "",
    order_by: str = "ORDER_BY_UNSPECIFIED",
    states: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Filter by state, then sort: ``sort_by_metric`` (a validation metric's name) or
    ``sort_by_attr``, ascending unless ``ORDER_BY_DESC``; with no order the searcher metric
    sorts best first. Rows without the sort value go last. Unsorted: by trial, then steps."""
    if states:
        rows = [c for c in rows if c["state"] in states]
    if sort_by_metric:

        def key(c: dict[str, Any]) -> Any:
            found = ((c["training"].get("validationMetrics") or {}).get("avgMetrics")) or {}
            return _number_or_none(found.get(sort_by_metric))

    elif sort_by_attr in ("", "SORT_BY_UNSPECIFIED"):
        return rows
    elif sort_by_attr in _ATTRS:
        key = _ATTRS[sort_by_attr]
    else:
        raise InvalidArgument(f"sortByAttr {sort_by_attr!r} is not one of: {', '.join(_ATTRS)}")
    desc = order_by in ("ORDER_BY_DESC", "desc")
    if order_by in ("", "ORDER_BY_UNSPECIFIED") and sort_by_attr == "SORT_BY_SEARCHER_METRIC":
        desc = not smaller_is_better
    present = [c for c in rows if key(c) is not None]
    missing = [c for c in rows if key(c) is None]
    return sorted(present, key=key, reverse=desc) + missing


@dataclasses.dataclass
class ListQuery:
    """The query parameters both listings take (the reference's ``GetTrialCheckpoints`` /
    ``GetExperimentCheckpoints``)."""

    offset: int = Query(0, ge=0)
    limit: Limit = 0
    sort_by_attr: str = Query("SORT_BY_UNSPECIFIED", alias="sortByAttr")
    sort_by_metric: str = Query("", alias="sortByMetric")
    order_by: str = Query("ORDER_BY_UNSPECIFIED", alias="orderBy")
    states: list[str] = Query(default=[])

    def answer(self, rows: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
        """Filter, sort (``config`` gives smaller_is_better) and page ``rows``."""
        _, smaller = experiment.searcher_metric(config)
        rows = select(
            rows,
            smaller_is_better=smaller,
            sort_by_attr=self.sort_by_attr,
            sort_by_metric=self.sort_by_metric,
            order_by=self.order_by,
            states=self.states,
        )
        chunk, pagination = _wire.page(rows, self.offset, self.limit)
        return {"checkpoints": chunk, "pagination": pagination}


@router.get("/trials/{trial_id}/checkpoints")
def trial_checkpoints(
    trial_id: int, caller: Caller, store: StoreDep, query: ListQuery = Depends()
) -> CheckpointsAnswer:
    """``{checkpoints: [v1Checkpoint], pagination}`` of a trial (by steps unless sorted);
    DELETED ones included unless ``states`` leaves them out; ``limit`` 0 is all."""
    caller.check_trial(trial_id)
    with store.read() as conn:
        trial = _trials.require_trial(conn, trial_id)
        exp = _experiments.require_experiment(conn, trial["experiment_id"])
        rows = [checkpoint_json(conn, c) for c in _checkpoints.of_trial(conn, trial_id)]
    return query.answer(rows, exp["config"])


@router.get("/experiments/{experiment_id}/checkpoints")
def experiment_checkpoints(
    experiment_id: int, caller: Caller, store: StoreDep, query: ListQuery = Depends()
) -> CheckpointsAnswer:
    """``{checkpoints, pagination}`` of every trial of the experiment (by trial, then steps,
    unless sorted); the SDK's default is the searcher metric, best first."""
    caller.check_experiment(experiment_id)
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        rows = [
            checkpoint_json(conn, c)
            for t in _trials.trials_of(conn, experiment_id)
            for c in _checkpoints.of_trial(conn, int(t["id"]))
        ]
    return query.answer(rows, exp["config"])
