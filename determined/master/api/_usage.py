"""0.37's resource-usage reports (``det resources``), for any logged-in user:

- ``GET /resources/allocation/allocations-csv``: one CSV row per allocation in a window;
- ``GET /resources/allocation/raw`` (CSV) and ``GET /api/v1/resources/allocation/raw`` (JSON):
  trials' training, validation and checkpointing spans in a window;
- ``GET /resources/allocation/aggregated`` (CSV) and ``GET /api/v1/resources/allocation/aggregated``
  (JSON): slot-seconds per UTC day or month, by user, experiment label and resource pool.

The rows come from ``store._usage``; this module parses the window, and writes the answers as
0.37's Go code does (its CSV writer, ``%f``, ``RFC3339Nano``). Aggregates are computed on
demand, today's so far included (0.37 stored each day once it had ended).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import APIRouter, Response

from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.store import Store, _usage
from determined.master.store._time import now as _now
from determined.master.store._time import parse, rfc3339

router = APIRouter()

DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"
_PERIODS = {DAILY: DAILY, "1": DAILY, MONTHLY: MONTHLY, "2": MONTHLY}
ALLOCATIONS_HEADER = (
    "allocation_id", "task_type", "username", "workspace_name", "experiment_id", "slots",
    "start_time", "end_time", "imagepulling_time", "slot_hours", "resource_pool",
)  # fmt: skip
RAW_HEADER = (
    "experiment_id", "kind", "username", "labels", "slots", "start_time", "end_time", "seconds",
)  # fmt: skip
AGGREGATED_HEADER = ("aggregation_type", "aggregation_key", "date", "seconds")
# Go's time.Parse with "2006-01-02T15:04:05Z" (a fraction of a second may follow the seconds).
_CSV_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")


# ---- Go's formats -------------------------------------------------------------------------------


def go_time(when: datetime.datetime | None) -> str:
    """Go's ``RFC3339Nano`` of a UTC time (no trailing zeros in the fraction); "" for none."""
    if when is None:
        return ""
    text = when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0")
    return text.rstrip(".") + "Z"


def go_float(value: float) -> str:
    """Go's ``%f``."""
    return f"{value:f}"


def go_duration(value: float) -> str:
    """0.37's ``formatDuration``: ``%f``, or ``0.0`` for zero."""
    return "0.0" if value == 0 else go_float(value)


def _go_csv_field(field: str) -> str:
    # encoding/csv quotes a field with a comma, quote or line break, one that begins with a
    # space, and `\.`; never an empty one.
    needs = field == "\\." or any(c in field for c in ',"\r\n') or field[:1].isspace()
    return '"' + field.replace('"', '""') + '"' if needs else field


def go_csv(rows: Iterable[Sequence[str]]) -> str:
    """Rows as Go's ``encoding/csv`` writes them (``\\n`` line ends)."""
    return "".join(",".join(_go_csv_field(f) for f in row) + "\n" for row in rows)


def _csv(rows: Iterable[Sequence[str]]) -> Response:
    return Response(go_csv(rows), media_type="text/csv")


# ---- the windows --------------------------------------------------------------------------------


def _parsed(value: str) -> datetime.datetime:
    when = parse(value)
    if when is None:
        raise ValueError("no time given")
    return when


def _csv_time(value: str, which: str) -> datetime.datetime:
    """A time as 0.37's CSV routes take it (Go's ``2006-01-02T15:04:05Z``)."""
    try:
        if not _CSV_TIME.fullmatch(value):
            raise ValueError("not YYYY-MM-DDTHH:MM:SSZ")
        return _parsed(value)
    except ValueError as e:
        raise InvalidArgument(
            f"invalid {which} time {value!r}: write it as YYYY-MM-DDTHH:MM:SSZ (UTC)"
        ) from e


def _api_time(value: str, which: str) -> datetime.datetime:
    """A time as the JSON routes take it (a protobuf timestamp: RFC 3339)."""
    if not value:
        raise InvalidArgument(f"no {which} time provided (timestamp_{_SIDE[which]})")
    try:
        return _parsed(value)
    except ValueError as e:
        raise InvalidArgument(
            f"invalid {which} time {value!r}: write it in RFC 3339, e.g. 2024-01-31T00:00:00Z"
        ) from e


_SIDE = {"start": "after", "end": "before"}


def _checked(start: datetime.datetime, end: datetime.datetime) -> None:
    if start > end:
        raise InvalidArgument("start time cannot be after end time")


def _date(value: str, monthly: bool, which: str) -> datetime.date:
    form, pattern = ("YYYY-MM", r"\d{4}-\d{2}") if monthly else ("YYYY-MM-DD", r"\d{4}-\d{2}-\d{2}")
    try:
        if not re.fullmatch(pattern, value):
            raise ValueError(f"not {form}")
        return datetime.date.fromisoformat(value + "-01" if monthly else value)
    except ValueError as e:
        raise InvalidArgument(f"invalid {which} date {value!r}: write it as {form}") from e


# ---- the reports --------------------------------------------------------------------------------


def allocation_rows(
    allocs: Iterable[_usage.Allocation],
    start: datetime.datetime,
    end: datetime.datetime,
    now: datetime.datetime,
) -> list[Sequence[str]]:
    """The allocation listing's CSV rows (header first); slot hours count the part of each
    allocation inside ``[start, end)``."""
    rows: list[Sequence[str]] = [ALLOCATIONS_HEADER]
    for a in allocs:
        slot_hours = _usage.overlap_seconds(a.start, a.until(now), start, end) * a.slots / 3600
        rows.append(
            (
                a.allocation_id,
                a.task_type,
                a.username,
                a.workspace_name,
                "" if a.experiment_id is None else str(a.experiment_id),
                str(a.slots),
                go_time(a.start),
                go_time(a.end),
                "0.0",
                go_duration(slot_hours),
                a.resource_pool,
            )
        )
    return rows


def _escape_label(label: str) -> str:
    return label.replace("\\", "\\\\").replace(",", "\\,")


def raw_rows(entries: Iterable[_usage.RawEntry]) -> list[Sequence[str]]:
    """The raw report's CSV rows (header first)."""
    rows: list[Sequence[str]] = [RAW_HEADER]
    for e in entries:
        rows.append(
            (
                str(e.experiment_id),
                e.kind,
                e.username,
                ",".join(map(_escape_label, e.labels)),
                str(e.slots),
                go_time(e.start),
                go_time(e.end),
                go_float(e.seconds),
            )
        )
    return rows


def raw_entry(e: _usage.RawEntry) -> dict[str, Any]:
    """``v1ResourceAllocationRawEntry``."""
    return {
        "kind": e.kind,
        "startTime": rfc3339(e.start),
        "endTime": rfc3339(e.end),
        "experimentId": e.experiment_id,
        "username": e.username,
        "userId": e.user_id,
        "labels": list(e.labels),
        "seconds": e.seconds,
        "slots": e.slots,
    }


def _raw(store: Store, start: datetime.datetime, end: datetime.datetime) -> list[_usage.RawEntry]:
    _checked(start, end)
    with store.read() as conn:
        return _usage.raw_entries(conn, start, end)


def _period(
    start_date: str, end_date: str, period: str
) -> tuple[str, datetime.date, datetime.date]:
    """(period, first day, last day) of an aggregation request; a month runs to its last day."""
    kind = _PERIODS.get(period)
    if kind is None:
        raise InvalidArgument(
            f"no aggregation period specified (period={period!r}): give {DAILY} or {MONTHLY}"
        )
    monthly = kind == MONTHLY
    first = _date(start_date, monthly, "start")
    last = _date(end_date, monthly, "end")
    if monthly:
        last = (last.replace(day=28) + datetime.timedelta(days=4)).replace(day=1) - _usage.DAY
    if first > last:
        raise InvalidArgument("start date cannot be after end date")
    return kind, first, last


def aggregated(
    store: Store, start_date: str, end_date: str, period: str, now: datetime.datetime
) -> list[dict[str, Any]]:
    """``v1ResourceAllocationAggregatedEntry`` per day (or month) from ``start_date`` to
    ``end_date`` inclusive, each day from that of the first allocation there is up to today
    (zero or not)."""
    kind, first, last = _period(start_date, end_date, period)
    with store.read() as conn:
        began = _usage.first_start(conn)
        first = max(first, began.date()) if began is not None else last + _usage.DAY
        last = min(last, now.date())
        if first > last:
            return []
        window = (_usage.midnight(first), _usage.midnight(last + _usage.DAY))
        allocs = _usage.allocations_in(conn, *window, now)
    usage = _usage.daily_usage(allocs, first, last, now)
    if kind == MONTHLY:
        usage = _usage.monthly_usage(usage)
    form = "%Y-%m" if kind == MONTHLY else "%Y-%m-%d"
    return [
        {
            "periodStart": day.strftime(form),
            "period": kind,
            "seconds": u.seconds,
            "byUsername": u.by_username,
            "byExperimentLabel": u.by_label,
            "byResourcePool": u.by_pool,
            "byAgentLabel": {},  # in 0.37's schema, never filled (its proto reserved the field)
        }
        for day, u in sorted(usage.items())
    ]


def aggregated_rows(entries: Iterable[dict[str, Any]]) -> list[Sequence[str]]:
    """The aggregated report's CSV rows (header first), in 0.37's order per period: labels,
    users, pools, total (keys sorted; 0.37 wrote them in Go's map order)."""
    rows: list[Sequence[str]] = [AGGREGATED_HEADER]
    for entry in entries:
        date = entry["periodStart"]
        for kind, field in (
            ("experiment_label", "byExperimentLabel"),
            ("username", "byUsername"),
            ("resource_pool", "byResourcePool"),
        ):
            for key, seconds in sorted(entry[field].items()):
                rows.append((kind, key, date, go_float(seconds)))
        rows.append(("total", "total", date, go_float(entry["seconds"])))
    return rows


# ---- the routes ---------------------------------------------------------------------------------


@router.get("/resources/allocation/allocations-csv", response_class=Response)
def allocations_csv(
    caller: Caller, store: StoreDep, timestamp_after: str = "", timestamp_before: str = ""
) -> Response:
    caller.require_user()
    start = _csv_time(timestamp_after, "start")
    end = _csv_time(timestamp_before, "end")
    _checked(start, end)
    now = _now()
    with store.read() as conn:
        allocs = _usage.allocations_in(conn, start, end, now)
    return _csv(allocation_rows(allocs, start, end, now))


@router.get("/resources/allocation/raw", response_class=Response)
def raw_csv(
    caller: Caller, store: StoreDep, timestamp_after: str = "", timestamp_before: str = ""
) -> Response:
    caller.require_user()
    start = _csv_time(timestamp_after, "start")
    end = _csv_time(timestamp_before, "end")
    return _csv(raw_rows(_raw(store, start, end)))


# The JSON routes take the query's names in snake case (0.37's CLI) or camel case (its bindings),
# as 0.37's gateway does.
@router.get("/api/v1/resources/allocation/raw")
def raw_json(
    caller: Caller,
    store: StoreDep,
    timestamp_after: str = "",
    timestamp_before: str = "",
    timestampAfter: str = "",  # noqa: N803
    timestampBefore: str = "",  # noqa: N803
) -> dict[str, Any]:
    caller.require_user()
    start = _api_time(timestamp_after or timestampAfter, "start")
    end = _api_time(timestamp_before or timestampBefore, "end")
    return {"resourceEntries": [raw_entry(e) for e in _raw(store, start, end)]}


@router.get("/resources/allocation/aggregated", response_class=Response)
def aggregated_csv(
    caller: Caller, store: StoreDep, start_date: str = "", end_date: str = "", period: str = ""
) -> Response:
    caller.require_user()
    return _csv(aggregated_rows(aggregated(store, start_date, end_date, period, _now())))


@router.get("/api/v1/resources/allocation/aggregated")
def aggregated_json(
    caller: Caller,
    store: StoreDep,
    start_date: str = "",
    end_date: str = "",
    period: str = "",
    startDate: str = "",  # noqa: N803
    endDate: str = "",  # noqa: N803
) -> dict[str, Any]:
    caller.require_user()
    entries = aggregated(store, start_date or startDate, end_date or endDate, period, _now())
    return {"resourceEntries": entries}
