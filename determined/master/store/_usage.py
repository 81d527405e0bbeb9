"""What 0.37's resource-usage reports (``det resources``) read: every allocation a window
overlaps (trials' runs, and the commands, notebooks, shells, TensorBoards and generic tasks
that ran), trials' workload spans, and the arithmetic on them; and the record of each trial
run they read (``allocation_usage``), written as the run starts and ends.

The arithmetic (overlaps, spans between consecutive events, slot-seconds per UTC day) is in
small pure functions that touch no clock and no database: a running allocation's end is the
``now`` its caller passes. The reads are plain SELECTs (SQLite and PostgreSQL); nothing is kept
between reports (0.37 kept a ``resource_aggregates`` table).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from determined.master.store._schema import (
    allocation_usage,
    allocations,
    checkpoints,
    experiments,
    metrics,
    projects,
    tasks,
    trials,
    users,
    workspaces,
)
from determined.master.store._time import as_utc

DAY = datetime.timedelta(days=1)
_MICROSECOND = datetime.timedelta(microseconds=1)
_CHUNK = 500  # ids per IN (...) list
# Metric partitions that are workloads, by the kind 0.37's raw report names them.
_KINDS = {"TRAINING": "training", "VALIDATION": "validation"}


# ---- the arithmetic ---------------------------------------------------------------------------


def overlap_seconds(
    start: datetime.datetime,
    end: datetime.datetime,
    window_start: datetime.datetime,
    window_end: datetime.datetime,
) -> float:
    """Seconds of ``[start, end)`` inside ``[window_start, window_end)``; 0 when apart."""
    low, high = max(start, window_start), min(end, window_end)
    return max((high - low).total_seconds(), 0.0)


def allocation_in_window(
    start: datetime.datetime,
    until: datetime.datetime,
    window_start: datetime.datetime,
    window_end: datetime.datetime,
) -> bool:
    """0.37's test of the allocation listing: ``[start - 1 µs, until)`` meets the window, so an
    allocation that starts inside it counts even before it has run a microsecond."""
    return window_start < window_end and start - _MICROSECOND < window_end and window_start < until


def workload_spans(
    events: Iterable[tuple[datetime.datetime, str | None]],
) -> list[tuple[str, datetime.datetime, datetime.datetime]]:
    """(kind, start, end) spans of one trial, as 0.37's raw report derives them: its events in
    time order; an event with a kind ends a span of that kind begun at the event before it.
    Events without a kind (the trial's and its runs' starts) only begin spans."""
    ordered = sorted(events, key=lambda e: e[0])
    return [
        (kind, before, at)
        for (before, _), (at, kind) in itertools.pairwise(ordered)
        if kind is not None
    ]


def midnight(day: datetime.date) -> datetime.datetime:
    """The UTC midnight that begins ``day``."""
    return datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.timezone.utc)


def daily_seconds(
    start: datetime.datetime,
    end: datetime.datetime,
    first_day: datetime.date,
    last_day: datetime.date,
) -> dict[datetime.date, float]:
    """Seconds of ``[start, end)`` in each UTC day from ``first_day`` to ``last_day``
    (inclusive) that it overlaps."""
    cursor = max(start, midnight(first_day))
    stop = min(end, midnight(last_day + DAY))
    out: dict[datetime.date, float] = {}
    while cursor < stop:
        day = cursor.astimezone(datetime.timezone.utc).date()
        piece_end = min(stop, midnight(day + DAY))
        out[day] = (piece_end - cursor).total_seconds()
        cursor = piece_end
    return out


def days(first: datetime.date, last: datetime.date) -> Iterator[datetime.date]:
    day = first
    while day <= last:
        yield day
        day += DAY


# ---- what the reports are made of -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Allocation:
    """One allocation: a run of a trial, or a non-trial task that ran."""

    allocation_id: str
    task_type: str  # TRIAL, COMMAND, NOTEBOOK, SHELL, TENSORBOARD or GENERIC
    username: str  # its owner (a trial's: its experiment's)
    workspace_name: str
    experiment_id: int | None
    labels: tuple[str, ...]  # its experiment's; none for a task
    resource_pool: str
    slots: int
    start: datetime.datetime
    end: datetime.datetime | None  # None while it runs

    def until(self, now: datetime.datetime) -> datetime.datetime:
        """Its end (``now`` while it runs), never before its start."""
        return max(self.start, self.end or now)


@dataclasses.dataclass
class Usage:
    """Slot-seconds of one period: the total, and split by owner, experiment label and pool."""

    seconds: float = 0.0
    by_username: dict[str, float] = dataclasses.field(default_factory=dict)
    by_label: dict[str, float] = dataclasses.field(default_factory=dict)
    by_pool: dict[str, float] = dataclasses.field(default_factory=dict)

    def add(self, alloc: Allocation, slot_seconds: float) -> None:
        self.seconds += slot_seconds
        _bump(self.by_username, alloc.username, slot_seconds)
        _bump(self.by_pool, alloc.resource_pool, slot_seconds)
        for label in alloc.labels:  # a label listed twice counts twice, as in 0.37
            _bump(self.by_label, label, slot_seconds)

    def merge(self, other: Usage) -> None:
        self.seconds += other.seconds
        for mine, theirs in (
            (self.by_username, other.by_username),
            (self.by_label, other.by_label),
            (self.by_pool, other.by_pool),
        ):
            for key, value in theirs.items():
                _bump(mine, key, value)


def _bump(table: dict[str, float], key: str, value: float) -> None:
    table[key] = table.get(key, 0.0) + value


def daily_usage(
    allocs: Iterable[Allocation],
    first_day: datetime.date,
    last_day: datetime.date,
    now: datetime.datetime,
) -> dict[datetime.date, Usage]:
    """Usage of each UTC day from ``first_day`` to ``last_day`` (every day present, zero or
    not): each allocation's overlap with the day times its slots."""
    out = {day: Usage() for day in days(first_day, last_day)}
    for alloc in allocs:
        for day, secs in daily_seconds(alloc.start, alloc.until(now), first_day, last_day).items():
            out[day].add(alloc, secs * alloc.slots)
    return out


def monthly_usage(daily: dict[datetime.date, Usage]) -> dict[datetime.date, Usage]:
    """The days' usage summed per month (keyed by the month's first day)."""
    out: dict[datetime.date, Usage] = {}
    for day in sorted(daily):
        out.setdefault(day.replace(day=1), Usage()).merge(daily[day])
    return out


@dataclasses.dataclass(frozen=True)
class RawEntry:
    """One workload span of a trial inside the window (0.37's ``v1ResourceAllocationRawEntry``)."""

    experiment_id: int
    kind: str  # training, validation or checkpointing
    username: str
    user_id: int
    labels: tuple[str, ...]
    slots: int
    start: datetime.datetime
    end: datetime.datetime
    seconds: float  # the part inside the window


# ---- the reads ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Experiment:
    labels: tuple[str, ...]
    resource_pool: str
    slots_per_trial: int


def _experiment_of(config: Any) -> _Experiment:
    config = config if isinstance(config, dict) else {}
    resources = config.get("resources") or {}
    labels = config.get("labels") or []
    return _Experiment(
        labels=tuple(str(x) for x in labels) if isinstance(labels, list) else (),
        resource_pool=str(resources.get("resource_pool") or "default"),
        slots_per_trial=int(resources.get("slots_per_trial") or 1),
    )


def _chunks(ids: Iterable[Any]) -> Iterator[list[Any]]:
    ordered = sorted(set(ids))
    for i in range(0, len(ordered), _CHUNK):
        yield ordered[i : i + _CHUNK]


def _experiments(conn: sa.Connection, ids: Iterable[int]) -> dict[int, _Experiment]:
    """The report's facts of each experiment (each config read once, however many runs)."""
    out: dict[int, _Experiment] = {}
    for chunk in _chunks(ids):
        query = sa.select(experiments.c.id, experiments.c.config).where(experiments.c.id.in_(chunk))
        for exp_id, config in conn.execute(query):
            out[int(exp_id)] = _experiment_of(config)
    return out


def _may_overlap(start: Any, end: Any, window_start: Any, window_end: Any) -> Any:
    """The SQL side of :func:`allocation_in_window`, looser (the exact test needs ``now``)."""
    return sa.and_(
        start <= window_end, sa.or_(end.is_(None), end > window_start, start > window_start)
    )


def _slots(resources: Any) -> int:
    return sum(int(r.get("slots") or 0) for r in resources or [] if isinstance(r, dict))


def record_run_start(
    conn: sa.Connection,
    allocation_id: str,
    experiment_id: int,
    resources: Any,
    start: datetime.datetime,
) -> None:
    """Record a trial's new run: its experiment's owner, workspace and pool as they are now
    (0.37 reports the workspace a run ran in, whatever moves later), its slots and start."""
    query = (
        sa.select(experiments.c.owner_id, experiments.c.config, workspaces.c.id, workspaces.c.name)
        .select_from(
            experiments.outerjoin(projects, projects.c.id == experiments.c.project_id).outerjoin(
                workspaces, workspaces.c.id == projects.c.workspace_id
            )
        )
        .where(experiments.c.id == experiment_id)
    )
    row = conn.execute(query).one()
    conn.execute(
        allocation_usage.insert().values(
            allocation_id=allocation_id,
            experiment_id=experiment_id,
            owner_id=int(row.owner_id),
            workspace_id=row.id,
            workspace_name=str(row.name or ""),
            resource_pool=_experiment_of(row.config).resource_pool,
            slots=_slots(resources),
            start_time=start,
        )
    )


def record_run_end(conn: sa.Connection, allocation_id: str, end: datetime.datetime | None) -> None:
    conn.execute(
        allocation_usage.update()
        .where(allocation_usage.c.allocation_id == allocation_id)
        .values(end_time=end)
    )


def _trial_allocations(
    conn: sa.Connection, window_start: datetime.datetime, window_end: datetime.datetime
) -> list[Allocation]:
    """Trials' runs from their records, those of deleted experiments included (0.37 keeps
    them); labels are the experiment's while it exists."""
    u = allocation_usage.c
    query = (
        sa.select(allocation_usage, users.c.username)
        .select_from(allocation_usage.outerjoin(users, users.c.id == u.owner_id))
        .where(_may_overlap(u.start_time, u.end_time, window_start, window_end))
    )
    rows = conn.execute(query).all()
    facts = _experiments(conn, (int(r.experiment_id) for r in rows))
    out = []
    for r in rows:
        exp = facts.get(int(r.experiment_id))
        out.append(
            Allocation(
                allocation_id=str(r.allocation_id),
                task_type="TRIAL",
                username=str(r.username or ""),
                workspace_name=str(r.workspace_name),
                experiment_id=int(r.experiment_id),
                labels=exp.labels if exp is not None else (),
                resource_pool=str(r.resource_pool),
                slots=int(r.slots),
                start=as_utc(r.start_time),
                end=None if r.end_time is None else as_utc(r.end_time),
            )
        )
    return out


def _task_allocations(
    conn: sa.Connection, window_start: datetime.datetime, window_end: datetime.datetime
) -> list[Allocation]:
    """Non-trial tasks that ran (an allocation id), from submission to end: the store keeps no
    separate start of their one allocation."""
    t = tasks.c
    query = (
        sa.select(
            t.allocation_id,
            t.type,
            t.slots,
            t.config,
            t.data,
            t.start_time,
            t.end_time,
            users.c.username,
        )
        .select_from(tasks.join(users, users.c.id == t.owner_id))
        .where(
            t.allocation_id.is_not(None),
            _may_overlap(t.start_time, t.end_time, window_start, window_end),
        )
    )
    rows = conn.execute(query).all()
    names = {int(i): str(n) for i, n in conn.execute(sa.select(workspaces.c.id, workspaces.c.name))}
    out = []
    for r in rows:
        data = r.data if isinstance(r.data, dict) else {}
        resources = (r.config or {}).get("resources") or {}
        out.append(
            Allocation(
                allocation_id=str(r.allocation_id),
                task_type=str(r.type),
                username=str(r.username),
                workspace_name=names.get(int(data.get("workspaceId") or 1), ""),
                experiment_id=None,
                labels=(),
                resource_pool=str(resources.get("resource_pool") or "default"),
                slots=int(r.slots),
                start=as_utc(r.start_time),
                end=None if r.end_time is None else as_utc(r.end_time),
            )
        )
    return out


def allocations_in(
    conn: sa.Connection,
    window_start: datetime.datetime,
    window_end: datetime.datetime,
    now: datetime.datetime,
) -> list[Allocation]:
    """Every allocation (trials' and tasks') that overlaps the window (as
    :func:`allocation_in_window` decides, running ones until ``now``), by start time."""
    found = _trial_allocations(conn, window_start, window_end)
    found += _task_allocations(conn, window_start, window_end)
    kept = [
        a for a in found if allocation_in_window(a.start, a.until(now), window_start, window_end)
    ]
    return sorted(kept, key=lambda a: (a.start, a.allocation_id))


def first_start(conn: sa.Connection) -> datetime.datetime | None:
    """When the first allocation there is began (0.37 aggregates days from that one on)."""
    starts = [
        conn.execute(sa.select(sa.func.min(allocation_usage.c.start_time))).scalar(),
        conn.execute(
            sa.select(sa.func.min(tasks.c.start_time)).where(tasks.c.allocation_id.is_not(None))
        ).scalar(),
    ]
    found = [as_utc(s) for s in starts if s is not None]
    return min(found) if found else None


def _candidate_trials(
    conn: sa.Connection, window_start: datetime.datetime, window_end: datetime.datetime
) -> list[int]:
    """Trials that may have a workload in the window: alive then, or one of their runs was."""
    alive = sa.select(trials.c.id).where(
        trials.c.start_time <= window_end,
        sa.or_(trials.c.end_time.is_(None), trials.c.end_time >= window_start),
    )
    ran = sa.select(allocations.c.trial_id).where(
        allocations.c.start_time <= window_end,
        sa.or_(allocations.c.end_time.is_(None), allocations.c.end_time >= window_start),
    )
    found = {int(i) for i in conn.execute(alive).scalars()}
    found |= {int(i) for i in conn.execute(ran).scalars()}
    return sorted(found)


def _events(
    conn: sa.Connection, trial_ids: Sequence[int]
) -> dict[int, list[tuple[datetime.datetime, str | None]]]:
    """Each trial's events: its start and its runs' starts (no kind), its training and
    validation reports and its checkpoints."""
    out: dict[int, list[tuple[datetime.datetime, str | None]]] = {i: [] for i in trial_ids}
    for chunk in _chunks(trial_ids):
        for trial_id, at in conn.execute(
            sa.select(trials.c.id, trials.c.start_time).where(trials.c.id.in_(chunk))
        ):
            out[int(trial_id)].append((as_utc(at), None))
        for trial_id, at in conn.execute(
            sa.select(allocations.c.trial_id, allocations.c.start_time).where(
                allocations.c.trial_id.in_(chunk)
            )
        ):
            out[int(trial_id)].append((as_utc(at), None))
        reports = sa.select(metrics.c.trial_id, metrics.c.partition, metrics.c.report_time).where(
            metrics.c.trial_id.in_(chunk), metrics.c.partition.in_(list(_KINDS))
        )
        for trial_id, partition, at in conn.execute(reports):
            out[int(trial_id)].append((as_utc(at), _KINDS[str(partition)]))
        for trial_id, at in conn.execute(
            sa.select(checkpoints.c.trial_id, checkpoints.c.report_time).where(
                checkpoints.c.trial_id.in_(chunk)
            )
        ):
            out[int(trial_id)].append((as_utc(at), "checkpointing"))
    return out


def raw_entries(
    conn: sa.Connection, window_start: datetime.datetime, window_end: datetime.datetime
) -> list[RawEntry]:
    """Trials' workload spans (:func:`workload_spans`) that overlap the window, by start time;
    ``seconds`` is the overlap."""
    trial_ids = _candidate_trials(conn, window_start, window_end)
    owners: dict[int, tuple[int, int, str]] = {}
    for chunk in _chunks(trial_ids):
        query = (
            sa.select(trials.c.id, trials.c.experiment_id, experiments.c.owner_id, users.c.username)
            .select_from(
                trials.join(experiments, experiments.c.id == trials.c.experiment_id).join(
                    users, users.c.id == experiments.c.owner_id
                )
            )
            .where(trials.c.id.in_(chunk))
        )
        for trial_id, exp_id, owner_id, username in conn.execute(query):
            owners[int(trial_id)] = (int(exp_id), int(owner_id), str(username))
    facts = _experiments(conn, (e for e, _, _ in owners.values()))
    out = []
    for trial_id, events in _events(conn, trial_ids).items():
        exp_id, owner_id, username = owners[trial_id]
        exp = facts.get(exp_id) or _experiment_of({})
        for kind, start, end in workload_spans(events):
            seconds = overlap_seconds(start, end, window_start, window_end)
            if seconds > 0:
                out.append(
                    RawEntry(
                        experiment_id=exp_id,
                        kind=kind,
                        username=username,
                        user_id=owner_id,
                        labels=exp.labels,
                        slots=exp.slots_per_trial,
                        start=start,
                        end=end,
                        seconds=seconds,
                    )
                )
    return sorted(out, key=lambda e: (e.start, e.experiment_id))
