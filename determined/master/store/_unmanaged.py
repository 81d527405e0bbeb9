"""Unmanaged experiments and trials (core_v2): which experiments are unmanaged, and the
external ids a rerun of the same script uses to find its experiment and trial again."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import sqlalchemy as sa

from determined.master.store import _time
from determined.master.store._engine import chunked, ids_in
from determined.master.store._enums import State
from determined.master.store._schema import trials, unmanaged_experiments, unmanaged_trials

_IS_UNMANAGED = sa.select(unmanaged_experiments.c.experiment_id).where(
    unmanaged_experiments.c.experiment_id == sa.bindparam("experiment_id")
)

# For queries that must leave unmanaged experiments out (the resource manager's).
UNMANAGED_IDS = sa.select(unmanaged_experiments.c.experiment_id)


def mark_experiment(conn: sa.Connection, experiment_id: int, external_id: str | None) -> None:
    conn.execute(
        unmanaged_experiments.insert().values(experiment_id=experiment_id, external_id=external_id)
    )


def is_unmanaged(conn: sa.Connection, experiment_id: int) -> bool:
    return conn.execute(_IS_UNMANAGED, {"experiment_id": experiment_id}).first() is not None


def external_ids(conn: sa.Connection, experiment_ids: Iterable[int]) -> dict[int, str | None]:
    """Of ``experiment_ids``, the unmanaged ones (the keys) and their external ids."""
    out: dict[int, str | None] = {}
    table = unmanaged_experiments
    for chunk in chunked(experiment_ids):
        q = sa.select(table.c.experiment_id, table.c.external_id)
        for exp_id, external in conn.execute(q.where(ids_in(table.c.experiment_id, chunk))):
            out[int(exp_id)] = external
    return out


def experiment_by_external(conn: sa.Connection, external_id: str) -> int | None:
    row = conn.execute(
        sa.select(unmanaged_experiments.c.experiment_id).where(
            unmanaged_experiments.c.external_id == external_id
        )
    ).first()
    return None if row is None else int(row[0])


def experiment_external_id(conn: sa.Connection, experiment_id: int) -> str | None:
    row = conn.execute(
        sa.select(unmanaged_experiments.c.external_id).where(
            unmanaged_experiments.c.experiment_id == experiment_id
        )
    ).first()
    return None if row is None else row[0]


def add_trial(
    conn: sa.Connection, trial_id: int, experiment_id: int, external_id: str | None
) -> None:
    conn.execute(
        unmanaged_trials.insert().values(
            trial_id=trial_id, experiment_id=experiment_id, external_id=external_id
        )
    )


def trial_by_external(conn: sa.Connection, experiment_id: int, external_id: str) -> int | None:
    row = conn.execute(
        sa.select(unmanaged_trials.c.trial_id).where(
            unmanaged_trials.c.experiment_id == experiment_id,
            unmanaged_trials.c.external_id == external_id,
        )
    ).first()
    return None if row is None else int(row[0])


def trial_external_id(conn: sa.Connection, trial_id: int) -> str | None:
    row = conn.execute(
        sa.select(unmanaged_trials.c.external_id).where(unmanaged_trials.c.trial_id == trial_id)
    ).first()
    return None if row is None else row[0]


def count_trials(conn: sa.Connection, experiment_id: int) -> int:
    q = sa.select(sa.func.count()).where(unmanaged_trials.c.experiment_id == experiment_id)
    return int(conn.execute(q).scalar_one())


def touch_trial(conn: sa.Connection, trial_id: int) -> None:
    """The trial's process said it lives (it started a run or sent a PATCH)."""
    conn.execute(
        unmanaged_trials.update()
        .where(unmanaged_trials.c.trial_id == trial_id)
        .values(last_activity=_time.now())
    )


def last_activity(conn: sa.Connection, trial_id: int) -> datetime.datetime | None:
    q = sa.select(unmanaged_trials.c.last_activity).where(unmanaged_trials.c.trial_id == trial_id)
    value = conn.execute(q).scalar_one_or_none()
    return None if value is None else _time.as_utc(value)


def silent_trials(conn: sa.Connection, since: datetime.datetime) -> list[int]:
    """Running trials (ACTIVE, a run started) whose process has said nothing since ``since``."""
    q = (
        sa.select(unmanaged_trials.c.trial_id)
        .join(trials, trials.c.id == unmanaged_trials.c.trial_id)
        .where(
            trials.c.state == State.ACTIVE.value,
            trials.c.run_id > 0,
            unmanaged_trials.c.last_activity < since,
        )
        .order_by(unmanaged_trials.c.trial_id)
    )
    return [int(row[0]) for row in conn.execute(q)]
