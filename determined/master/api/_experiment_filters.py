"""``GET /api/v1/experiments``'s filters and sorting, as 0.37's master applies them: over the
``v1Experiment`` bodies the listing returns (pure functions, so they are tested alone)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from determined.master._errors import InvalidArgument

# sortBy -> the v1Experiment field it orders by (0.37's orderColMap).
SORT_KEYS: dict[str, str] = {
    "SORT_BY_UNSPECIFIED": "id",
    "SORT_BY_ID": "id",
    "SORT_BY_DESCRIPTION": "description",
    "SORT_BY_NAME": "name",
    "SORT_BY_START_TIME": "startTime",
    "SORT_BY_END_TIME": "endTime",
    "SORT_BY_STATE": "state",
    "SORT_BY_NUM_TRIALS": "numTrials",
    "SORT_BY_PROGRESS": "progress",
    "SORT_BY_USER": "displayName",
    "SORT_BY_FORKED_FROM": "forkedFrom",
    "SORT_BY_RESOURCE_POOL": "resourcePool",
    "SORT_BY_PROJECT_ID": "projectId",
    "SORT_BY_CHECKPOINT_SIZE": "checkpointSize",
    "SORT_BY_CHECKPOINT_COUNT": "checkpointCount",
    "SORT_BY_SEARCHER_METRIC_VAL": "bestTrialSearcherMetric",
}
ORDERS = ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC")


@dataclass
class IdFilter:
    """0.37's ``experimentIdFilter`` (``v1Int32FieldFilter``): every bound given must hold."""

    lt: int | None = None
    lte: int | None = None
    gt: int | None = None
    gte: int | None = None
    incl: Sequence[int] = ()
    not_in: Sequence[int] = ()

    def holds(self, value: int) -> bool:
        return (
            (self.lt is None or value < self.lt)
            and (self.lte is None or value <= self.lte)
            and (self.gt is None or value > self.gt)
            and (self.gte is None or value >= self.gte)
            and (not self.incl or value in self.incl)
            and value not in self.not_in
        )


@dataclass
class ExperimentFilter:
    """What one listing asks for. ``name`` and ``description`` match case-insensitive
    substrings; an experiment must carry every one of ``labels``; ``states`` are
    ``STATE_*`` names; the other lists match any of their values."""

    name: str = ""
    description: str = ""
    labels: Sequence[str] = ()
    states: Sequence[str] = ()
    users: Sequence[str] = ()
    user_ids: Sequence[int] = ()
    archived: bool | None = None
    # archived=false over every project also hides experiments of archived projects and
    # workspaces (0.37 does; a listing of one project shows its experiments either way).
    hide_archived_parents: bool = False
    ids: IdFilter = field(default_factory=IdFilter)

    def keeps(self, e: dict[str, Any]) -> bool:
        return (
            (not self.name or self.name.lower() in str(e.get("name") or "").lower())
            and (
                not self.description
                or self.description.lower() in str(e.get("description") or "").lower()
            )
            and set(self.labels) <= set(e.get("labels") or [])
            and (not self.states or e.get("state") in self.states)
            and (not self.users or e.get("username") in self.users)
            and (not self.user_ids or e.get("userId") in self.user_ids)
            and (self.archived is None or bool(e.get("archived")) == self.archived)
            and not (self.hide_archived_parents and e.get("parentArchived"))
            and self.ids.holds(int(e["id"]))
        )


def _sort_value(key: str) -> Callable[[dict[str, Any]], Any]:
    def value(e: dict[str, Any]) -> Any:
        v = e.get(key)
        if key == "checkpointSize" and v is not None:
            return int(v)  # an int64 travels as a string
        if key == "progress":
            return v or 0.0  # 0.37 sorts COALESCE(progress, 0)
        return v

    return value


def sort_experiments(
    rows: list[dict[str, Any]], sort_by: str = "SORT_BY_UNSPECIFIED", order_by: str = ""
) -> list[dict[str, Any]]:
    """Sorted by ``sort_by``'s field, ties by id, both ascending unless ``ORDER_BY_DESC``;
    rows without a value come last either way (0.37: ``DESC NULLS LAST``, ascending nulls
    sort last in Postgres too).

    Raises:
        InvalidArgument: an unknown ``sortBy`` or ``orderBy``.
    """
    if sort_by not in SORT_KEYS:
        raise InvalidArgument(f"sortBy {sort_by!r} is not one of: {', '.join(SORT_KEYS)}")
    if order_by and order_by not in ORDERS:
        raise InvalidArgument(f"orderBy {order_by!r} is not one of: {', '.join(ORDERS)}")
    desc = order_by == "ORDER_BY_DESC"
    value = _sort_value(SORT_KEYS[sort_by])
    present = [e for e in rows if value(e) is not None]
    missing = [e for e in rows if value(e) is None]
    present.sort(key=lambda e: (value(e), int(e["id"])), reverse=desc)
    missing.sort(key=lambda e: int(e["id"]), reverse=desc)
    return present + missing
