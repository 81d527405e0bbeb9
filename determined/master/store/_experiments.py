"""Experiment rows and their search-method snapshots."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa

from determined.master._errors import NotFound
from determined.master.store import _time, _token_cache, _trial_sources
from determined.master.store._engine import chunked, ids_in, inserted_id
from determined.master.store._enums import State
from determined.master.store._rows import ExperimentRow
from determined.master.store._schema import (
    alerts,
    allocations,
    checkpoints,
    cluster_info,
    experiments,
    job_positions,
    metrics,
    projects,
    run_metadata,
    searcher_snapshots,
    task_logs,
    tokens,
    trials,
    unmanaged_experiments,
    unmanaged_trials,
    users,
    workspaces,
)


def insert_experiment(
    conn: sa.Connection,
    *,
    config: dict[str, Any],
    original_config: str,
    model_definition: bytes | None,
    owner_id: int,
    project_id: int = 1,
) -> int:
    """A new experiment (created PAUSED, as in the reference, then activated) in the
    project ``project_id`` (1: the default one)."""
    row = conn.execute(
        experiments.insert().values(
            **next_id(conn, experiments),
            state=State.PAUSED.value,
            config=config,
            original_config=original_config,
            model_definition=model_definition,
            owner_id=owner_id,
            parent_id=None,
            archived=False,
            progress=None,
            notes="",
            start_time=_time.now(),
            project_id=project_id,
        )
    )
    return inserted_id(row)


def get_experiment(conn: sa.Connection, experiment_id: int) -> ExperimentRow | None:
    row = (
        conn.execute(sa.select(experiments).where(experiments.c.id == experiment_id))
        .mappings()
        .first()
    )
    return None if row is None else cast(ExperimentRow, dict(row))


def require_experiment(conn: sa.Connection, experiment_id: int) -> ExperimentRow:
    """The experiment's row. Raises NotFound (404) when there is none."""
    exp = get_experiment(conn, experiment_id)
    if exp is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return exp


def owner_of(conn: sa.Connection, experiment_id: int) -> int:
    """The experiment's owner's user id. Raises NotFound (404) when there is no experiment."""
    row = conn.execute(
        sa.select(experiments.c.owner_id).where(experiments.c.id == experiment_id)
    ).first()
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return int(row[0])


def experiments_by_id(conn: sa.Connection, ids: Iterable[int]) -> dict[int, ExperimentRow]:
    """The experiments among ``ids`` that exist, by id, without their model definition's
    bytes (``model_definition`` is None; ``model_definition_size`` is its length). Their
    ``config`` dicts are shared between reads (``config_of``): read them, never change them."""
    columns = [c for c in experiments.c if c.name not in ("model_definition", "config")]
    size = sa.func.coalesce(sa.func.length(experiments.c.model_definition), 0)
    text = sa.cast(experiments.c.config, sa.Text).label("config_text")
    out: dict[int, ExperimentRow] = {}
    for chunk in chunked(ids):
        q = sa.select(*columns, text, size.label("model_definition_size"))
        for r in conn.execute(q.where(ids_in(experiments.c.id, chunk))).mappings():
            row = {k: v for k, v in r.items() if k != "config_text"}
            row.update(config=config_of(r["config_text"]), model_definition=None)
            out[int(r["id"])] = cast(ExperimentRow, row)
    return out


def require_shown(conn: sa.Connection, experiment_id: int) -> ExperimentRow:
    """The experiment's row as ``experiments_by_id`` reads it, to show: without its model
    definition's bytes (up to megabytes, read on every poll of its page only for their length)
    and with the shared config (never change it). Raises NotFound (404) when there is none."""
    exp = experiments_by_id(conn, [experiment_id]).get(int(experiment_id))
    if exp is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return exp


# Experiment configs by their stored JSON text, decoded once per process: a listing of 1,000
# experiments decoded 1,000 configs (~20 ms) on every request. The text is the key, so a
# changed config is another key: nothing to invalidate after writes or restarts.
_CONFIGS: dict[str, dict[str, Any]] = {}
_CONFIGS_KEPT = 4096


def config_of(text: str) -> dict[str, Any]:
    """The config stored as ``text``, decoded (shared: never change it)."""
    config = _CONFIGS.get(text)
    if config is None:
        if len(_CONFIGS) >= _CONFIGS_KEPT:
            _CONFIGS.clear()
        config = _CONFIGS[text] = json.loads(text)
    return config


def list_experiment_ids(conn: sa.Connection) -> list[int]:
    q = sa.select(experiments.c.id).order_by(experiments.c.id)
    return [int(r[0]) for r in conn.execute(q)]


def experiment_id_page(
    conn: sa.Connection,
    *,
    project_id: int = 0,
    archived: bool | None = None,
    owner_ids: Sequence[int] = (),
    usernames: Sequence[str] = (),
    hide_archived_parents: bool = False,
    ids: Mapping[str, Any] | None = None,
    desc: bool = False,
    offset: int = 0,
    limit: int = 0,
) -> tuple[list[int], int]:
    """``(ids of one page, how many match)`` of the experiments that match, by id, filtered,
    counted and paged by the database: a listing's work then grows with its page, not with
    the cluster. ``project_id`` 0: every project; ``owner_ids``/``usernames``: any of them
    (empty: anyone's); ``hide_archived_parents``: not in an archived project or workspace;
    ``ids``: bounds ``lt``, ``lte``, ``gt``, ``gte``, ``incl`` (any of), ``not_in``; ``limit``
    0: every one from ``offset``."""
    e = experiments
    where: list[sa.ColumnElement[bool]] = []
    if project_id:
        where.append(e.c.project_id == project_id)
    if archived is not None:
        where.append(e.c.archived == archived)
    if owner_ids:
        where.append(ids_in(e.c.owner_id, list(owner_ids)))
    if usernames:
        owners = sa.select(users.c.id).where(users.c.username.in_(list(usernames)))
        where.append(e.c.owner_id.in_(owners))
    if hide_archived_parents:
        archived_parents = (
            sa.select(projects.c.id)
            .join(workspaces, workspaces.c.id == projects.c.workspace_id, isouter=True)
            .where(sa.or_(projects.c.archived, sa.func.coalesce(workspaces.c.archived, False)))
        )
        where.append(sa.func.coalesce(e.c.project_id, 1).not_in(archived_parents))
    bounds = dict(ids or {})
    for name, op in (("lt", "__lt__"), ("lte", "__le__"), ("gt", "__gt__"), ("gte", "__ge__")):
        if bounds.get(name) is not None:
            where.append(getattr(e.c.id, op)(int(bounds[name])))
    if bounds.get("incl"):
        where.append(ids_in(e.c.id, list(bounds["incl"])))
    if bounds.get("not_in"):
        where.append(sa.not_(ids_in(e.c.id, list(bounds["not_in"]))))
    total = int(conn.execute(sa.select(sa.func.count()).select_from(e).where(*where)).scalar_one())
    q = sa.select(e.c.id).where(*where).order_by(e.c.id.desc() if desc else e.c.id)
    if limit:
        q = q.limit(limit)
    if offset:
        q = q.offset(offset)
    return [int(r[0]) for r in conn.execute(q)], total


def update_experiment(conn: sa.Connection, experiment_id: int, **values: Any) -> None:
    if "state" in values and isinstance(values["state"], State):
        values["state"] = values["state"].value
    conn.execute(experiments.update().where(experiments.c.id == experiment_id).values(**values))


def save_snapshot(conn: sa.Connection, experiment_id: int, snapshot: dict[str, Any]) -> None:
    """Replace the experiment's search-method snapshot (same transaction as its event)."""
    updated = conn.execute(
        searcher_snapshots.update()
        .where(searcher_snapshots.c.experiment_id == experiment_id)
        .values(snapshot=snapshot, updated_at=_time.now())
    )
    if updated.rowcount == 0:
        conn.execute(
            searcher_snapshots.insert().values(
                experiment_id=experiment_id, snapshot=snapshot, updated_at=_time.now()
            )
        )


def load_snapshot(conn: sa.Connection, experiment_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        sa.select(searcher_snapshots.c.snapshot).where(
            searcher_snapshots.c.experiment_id == experiment_id
        )
    ).first()
    return None if row is None else dict(row[0])


def next_id(conn: sa.Connection, table: sa.Table) -> dict[str, Any]:
    """``{"id": N}`` when the table's next id must skip ids of deleted rows, else ``{}``.

    SQLite gives a new row max(id) + 1, so deleting the newest experiment would hand its id
    (and its trials' ids) to the next one; ids are never reused, as in the reference.
    """
    key = f"deleted_max_id.{table.name}"
    row = conn.execute(sa.select(cluster_info.c.value).where(cluster_info.c.key == key)).first()
    if row is None:
        return {}
    current = conn.execute(sa.select(sa.func.max(table.c.id))).scalar() or 0
    floor = int(row[0])
    if floor >= current:
        return {"id": floor + 1}
    if conn.dialect.name == "postgresql":
        # A row inserted with an explicit id does not advance PostgreSQL's sequence, which
        # would hand that id out again: once ids were given explicitly, keep doing so.
        return {"id": int(current) + 1}
    return {}


def _remember_max_id(conn: sa.Connection, table: sa.Table) -> None:
    current = int(conn.execute(sa.select(sa.func.max(table.c.id))).scalar() or 0)
    key = f"deleted_max_id.{table.name}"
    old = conn.execute(sa.select(cluster_info.c.value).where(cluster_info.c.key == key)).first()
    if old is None:
        conn.execute(cluster_info.insert().values(key=key, value=str(current)))
    elif int(old[0]) < current:
        conn.execute(
            cluster_info.update().where(cluster_info.c.key == key).values(value=str(current))
        )


def delete_experiment(conn: sa.Connection, experiment_id: int) -> None:
    """Remove an experiment and everything recorded under it: trials, runs and their tokens,
    metrics, checkpoint records, task logs, alerts, run metadata, the search snapshot.
    Checkpoint *files* are the caller's to delete first. Its id and its trials' ids are not
    given out again."""
    _remember_max_id(conn, experiments)
    _remember_max_id(conn, trials)
    trial_ids = sa.select(trials.c.id).where(trials.c.experiment_id == experiment_id)
    task_ids = sa.select(trials.c.task_id).where(trials.c.experiment_id == experiment_id)
    alloc_ids = sa.select(allocations.c.id).where(allocations.c.trial_id.in_(trial_ids))
    conn.execute(tokens.delete().where(tokens.c.allocation_id.in_(alloc_ids)))
    # Rare, and its trials and allocations go too: drop every cached token.
    _token_cache.forget_after_commit(conn, everything=True)
    conn.execute(task_logs.delete().where(task_logs.c.task_id.in_(task_ids)))
    uuids = sa.select(checkpoints.c.uuid).where(checkpoints.c.trial_id.in_(trial_ids))
    _trial_sources.forget(conn, trial_ids, uuids)
    for table in (allocations, metrics, checkpoints, run_metadata):
        conn.execute(table.delete().where(table.c.trial_id.in_(trial_ids)))
    conn.execute(alerts.delete().where(alerts.c.experiment_id == experiment_id))
    # Unmanaged: its external ids are free again.
    conn.execute(unmanaged_trials.delete().where(unmanaged_trials.c.experiment_id == experiment_id))
    conn.execute(
        unmanaged_experiments.delete().where(unmanaged_experiments.c.experiment_id == experiment_id)
    )
    conn.execute(job_positions.delete().where(job_positions.c.experiment_id == experiment_id))
    conn.execute(trials.delete().where(trials.c.experiment_id == experiment_id))
    conn.execute(
        searcher_snapshots.delete().where(searcher_snapshots.c.experiment_id == experiment_id)
    )
    conn.execute(experiments.delete().where(experiments.c.id == experiment_id))
