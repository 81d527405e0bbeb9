"""Trial rows and their allocations (runs)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import sqlalchemy as sa

from determined.master._errors import NotFound
from determined.master.store import _time, _usage
from determined.master.store._engine import chunked, ids_in, inserted_id
from determined.master.store._enums import AllocationState, State
from determined.master.store._experiments import next_id
from determined.master.store._rows import AllocationRow, LiveAllocationRow, TrialRow
from determined.master.store._schema import allocations, experiments, metrics, trials
from determined.master.store._unmanaged import UNMANAGED_IDS


def insert_trial(
    conn: sa.Connection,
    *,
    experiment_id: int,
    request_id: str,
    hparams: dict[str, Any],
    seed: int,
    state: State,
    warm_start_checkpoint: str | None = None,
    has_work: bool = False,
) -> int:
    """A trial for the search method's ``Create``; its task id is ``<exp>.<request_id>``.

    It waits for its first operation (``op_complete``) unless ``has_work``: a trial of a
    search without ``max_length`` gets no operation and is runnable from the start."""
    row = conn.execute(
        trials.insert().values(
            **next_id(conn, trials),
            experiment_id=experiment_id,
            request_id=request_id,
            task_id=f"{experiment_id}.{request_id}",
            state=state.value,
            hparams=hparams,
            seed=seed,
            warm_start_checkpoint=warm_start_checkpoint,
            restarts=0,
            run_id=0,
            op_length=None,
            op_complete=not has_work,
            op_closed=False,
            searcher_units=0.0,
            runner_state="",
            total_batches=0,
            summary_metrics={},
            start_time=_time.now(),
        )
    )
    return inserted_id(row)


# Built once: these run for every request of a trial (auth, metric reports), and building a
# statement costs more than running it.
_GET_TRIAL = sa.select(trials).where(trials.c.id == sa.bindparam("trial_id"))
_GET_ALLOCATION = sa.select(allocations).where(allocations.c.id == sa.bindparam("allocation_id"))


def get_trial(conn: sa.Connection, trial_id: int) -> TrialRow | None:
    row = conn.execute(_GET_TRIAL, {"trial_id": trial_id}).mappings().first()
    return None if row is None else cast(TrialRow, dict(row))


def require_trial(conn: sa.Connection, trial_id: int) -> TrialRow:
    """The trial's row. Raises NotFound (404) when there is none."""
    trial = get_trial(conn, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def trial_by_request(conn: sa.Connection, experiment_id: int, request_id: str) -> TrialRow | None:
    q = sa.select(trials).where(
        trials.c.experiment_id == experiment_id, trials.c.request_id == request_id
    )
    row = conn.execute(q).mappings().first()
    return None if row is None else cast(TrialRow, dict(row))


def trial_by_task(conn: sa.Connection, task_id: str) -> TrialRow | None:
    """The trial whose task ``task_id`` is: its current one, or one it ran under before it
    was continued (``det e continue`` gives the trial a new task, as 0.37)."""
    row = conn.execute(sa.select(trials).where(trials.c.task_id == task_id)).mappings().first()
    if row is None:
        q = sa.select(allocations.c.trial_id).where(allocations.c.task_id == task_id).limit(1)
        trial_id = conn.execute(q).scalar()
        if trial_id is not None:
            return get_trial(conn, int(trial_id))
    return None if row is None else cast(TrialRow, dict(row))


def task_ids_of(conn: sa.Connection, trial: TrialRow) -> list[str]:
    """The trial's task ids, oldest first: those its runs had (one per ``det e continue``,
    ``<previous>-<n>`` as 0.37 names them), then its current one."""
    q = (
        sa.select(allocations.c.task_id, sa.func.min(allocations.c.run_id))
        .where(allocations.c.trial_id == trial["id"])
        .group_by(allocations.c.task_id)
        .order_by(sa.func.min(allocations.c.run_id))
    )
    found = [str(r[0]) for r in conn.execute(q)]
    current = str(trial["task_id"])
    return [t for t in found if t != current] + [current]


def warm_start_checkpoints(conn: sa.Connection) -> set[str]:
    """Every checkpoint some trial, of any experiment, was warm-started from."""
    col = trials.c.warm_start_checkpoint
    return {str(r[0]) for r in conn.execute(sa.select(col).where(col.is_not(None)).distinct())}


def trials_of(conn: sa.Connection, experiment_id: int) -> list[TrialRow]:
    q = sa.select(trials).where(trials.c.experiment_id == experiment_id).order_by(trials.c.id)
    return [cast(TrialRow, dict(r)) for r in conn.execute(q).mappings()]


def trial_counts(conn: sa.Connection, experiment_ids: Iterable[int]) -> dict[int, int]:
    """How many trials each of ``experiment_ids`` (each a key) has: counted by the database,
    not read row by row (10,000 trials' rows cost a listing ~40 ms)."""
    out = {int(e): 0 for e in experiment_ids}
    for chunk in chunked(out):
        q = (
            sa.select(trials.c.experiment_id, sa.func.count())
            .where(ids_in(trials.c.experiment_id, chunk))
            .group_by(trials.c.experiment_id)
        )
        for exp_id, n in conn.execute(q):
            out[int(exp_id)] = int(n)
    return out


def running_experiments(
    conn: sa.Connection, experiment_ids: Iterable[int], unmanaged: Iterable[int] = ()
) -> set[int]:
    """Those of ``experiment_ids`` of which an ACTIVE trial runs now: it has a RUNNING
    allocation (not PENDING: its resources are not there yet), or, for the ``unmanaged``
    ones (no allocations), its user's process has started a run (``run_id`` > 0)."""
    wanted, own = set(map(int, experiment_ids)), set(map(int, unmanaged))
    out: set[int] = set()
    active = trials.c.state == State.ACTIVE.value
    for chunk in chunked(wanted - own):
        q = (
            sa.select(trials.c.experiment_id)
            .join(allocations, allocations.c.trial_id == trials.c.id)
            .where(ids_in(trials.c.experiment_id, chunk), active)
            .where(allocations.c.state == AllocationState.RUNNING.value)
            .distinct()
        )
        out.update(int(r[0]) for r in conn.execute(q))
    for chunk in chunked(wanted & own):
        q = (
            sa.select(trials.c.experiment_id)
            .where(ids_in(trials.c.experiment_id, chunk), active, trials.c.run_id > 0)
            .distinct()
        )
        out.update(int(r[0]) for r in conn.execute(q))
    return out


def best_of_experiments(
    conn: sa.Connection, experiment_ids: Iterable[int]
) -> dict[int, list[tuple[int, dict[str, Any] | None]]]:
    """``(trial id, its best validation's metrics or None)`` of every trial of
    ``experiment_ids`` (each a key), by experiment, in ``trials_of``'s order: one query, and
    of each best validation only its metrics."""
    out: dict[int, list[tuple[int, dict[str, Any] | None]]] = {int(e): [] for e in experiment_ids}
    best = metrics.alias("best")
    q = sa.select(trials.c.id, trials.c.experiment_id, best.c.metrics).join(
        best, best.c.id == trials.c.best_validation_id, isouter=True
    )
    for chunk in chunked(out):
        found = q.where(ids_in(trials.c.experiment_id, chunk)).order_by(trials.c.id)
        for trial_id, exp_id, values in conn.execute(found):
            out[int(exp_id)].append((int(trial_id), values))
    return out


def update_trial(conn: sa.Connection, trial_id: int, **values: Any) -> None:
    if "state" in values and isinstance(values["state"], State):
        values["state"] = values["state"].value
    conn.execute(trials.update().where(trials.c.id == trial_id).values(**values))


def insert_allocation(
    conn: sa.Connection, trial_id: int, resources: list[dict[str, Any]]
) -> AllocationRow:
    """A new run of the trial: run id + 1, allocation id ``<task_id>.<run_id>``."""
    trial = require_trial(conn, trial_id)
    run_id = int(trial["run_id"]) + 1
    allocation_id = f"{trial['task_id']}.{run_id}"
    start = _time.now()
    conn.execute(
        allocations.insert().values(
            id=allocation_id,
            task_id=trial["task_id"],
            trial_id=trial_id,
            run_id=run_id,
            state=AllocationState.RUNNING.value,
            resources=resources,
            preempted=False,
            acked=False,
            ready=False,
            start_time=start,
        )
    )
    _usage.record_run_start(conn, allocation_id, int(trial["experiment_id"]), resources, start)
    update_trial(conn, trial_id, run_id=run_id)
    return require_allocation(conn, allocation_id)


def get_allocation(conn: sa.Connection, allocation_id: str) -> AllocationRow | None:
    row = conn.execute(_GET_ALLOCATION, {"allocation_id": allocation_id}).mappings().first()
    return None if row is None else cast(AllocationRow, dict(row))


def require_allocation(conn: sa.Connection, allocation_id: str) -> AllocationRow:
    """The allocation's row. Raises NotFound (404) when there is none."""
    alloc = get_allocation(conn, allocation_id)
    if alloc is None:
        raise NotFound(f"allocation {allocation_id} not found")
    return alloc


def allocations_of(conn: sa.Connection, trial_id: int) -> list[AllocationRow]:
    """Every run of the trial, oldest first."""
    q = (
        sa.select(allocations)
        .where(allocations.c.trial_id == trial_id)
        .order_by(allocations.c.run_id)
    )
    return [cast(AllocationRow, dict(r)) for r in conn.execute(q).mappings()]


def live_allocation(conn: sa.Connection, trial_id: int) -> AllocationRow | None:
    """The trial's allocation that has not terminated, if any."""
    q = sa.select(allocations).where(
        allocations.c.trial_id == trial_id,
        allocations.c.state != AllocationState.TERMINATED.value,
    )
    row = conn.execute(q).mappings().first()
    return None if row is None else cast(AllocationRow, dict(row))


def update_allocation(conn: sa.Connection, allocation_id: str, **values: Any) -> None:
    if "state" in values and isinstance(values["state"], AllocationState):
        values["state"] = values["state"].value
    conn.execute(allocations.update().where(allocations.c.id == allocation_id).values(**values))
    if "end_time" in values:
        _usage.record_run_end(conn, allocation_id, values["end_time"])


def set_allocation_waiting(conn: sa.Connection, allocation_id: str, waiting: bool) -> None:
    """A live allocation whose resources are not there yet (PENDING: a Slurm job still in
    Slurm's queue) or are (RUNNING); a terminated one is left alone."""
    state = AllocationState.PENDING if waiting else AllocationState.RUNNING
    conn.execute(
        allocations.update()
        .where(
            allocations.c.id == allocation_id,
            allocations.c.state != AllocationState.TERMINATED.value,
        )
        .values(state=state.value)
    )


def runnable_trials(conn: sa.Connection) -> list[TrialRow]:
    """Trials that need a run now (docs/reference/master.md §4.2): ACTIVE in an ACTIVE
    experiment, with a pending operation and no live allocation; oldest first.

    The one place that decides "unmanaged: do not schedule": an unmanaged experiment's trials
    run in its user's own process and never take a slot."""
    live = sa.select(allocations.c.trial_id).where(
        allocations.c.state != AllocationState.TERMINATED.value
    )
    q = (
        sa.select(trials)
        .join(experiments, experiments.c.id == trials.c.experiment_id)
        .where(
            trials.c.state == State.ACTIVE.value,
            experiments.c.state == State.ACTIVE.value,
            trials.c.op_complete.is_(False),
            trials.c.id.not_in(live),
            trials.c.experiment_id.not_in(UNMANAGED_IDS),
        )
        .order_by(trials.c.experiment_id, trials.c.id)
    )
    return [cast(TrialRow, dict(r)) for r in conn.execute(q).mappings()]


def live_allocations(conn: sa.Connection) -> list[LiveAllocationRow]:
    """Every allocation that has not terminated, with its trial's state as ``trial_state``."""
    q = (
        sa.select(allocations, trials.c.state.label("trial_state"))
        .join(trials, trials.c.id == allocations.c.trial_id)
        .where(allocations.c.state != AllocationState.TERMINATED.value)
    )
    return [cast(LiveAllocationRow, dict(r)) for r in conn.execute(q).mappings()]
