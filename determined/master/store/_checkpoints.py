"""Checkpoint records and the storage backends they were written to."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterable
from typing import Any, cast

import sqlalchemy as sa

from determined.master._errors import Conflict, InvalidArgument, NotFound
from determined.master.store import _time
from determined.master.store._engine import chunked, ids_in, inserted_id
from determined.master.store._rows import CheckpointRow
from determined.master.store._schema import checkpoints, storage_backends

COMPLETED = "STATE_COMPLETED"
DELETED = "STATE_DELETED"
# Some of its files were removed (``det c rm --glob``); what is left still downloads.
PARTIALLY_DELETED = "STATE_PARTIALLY_DELETED"


def storage_id(conn: sa.Connection, config: dict[str, Any]) -> int:
    """The id of the backend described by ``config``, registered on first use."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    q = sa.select(storage_backends.c.id).where(storage_backends.c.digest == digest)
    row = conn.execute(q).first()
    if row is not None:
        return int(row[0])
    result = conn.execute(storage_backends.insert().values(digest=digest, config=config))
    return inserted_id(result)


def _size(resources: dict[str, Any]) -> int:
    try:
        return sum(int(v) for v in resources.values())
    except (TypeError, ValueError) as e:
        raise InvalidArgument(
            f"checkpoint resources must map file paths to sizes in bytes: {e}"
        ) from e


def insert(
    conn: sa.Connection,
    *,
    uuid: str,
    trial_id: int,
    task_id: str,
    allocation_id: str | None,
    report_time: datetime.datetime | None,
    resources: dict[str, Any],
    metadata: dict[str, Any],
    storage: int | None,
) -> None:
    """Record a COMPLETED checkpoint.

    Raises:
        InvalidArgument: bad resources, metadata without an integer ``steps_completed``, or
            a ``storage`` id that names no registered backend.
        Conflict: the uuid was already reported with other content.
    """
    steps = metadata.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise InvalidArgument(
            f"checkpoint metadata must hold steps_completed as an integer >= 0, not {steps!r}"
        )
    values = {
        "task_id": task_id,
        "allocation_id": allocation_id,
        "trial_id": trial_id,
        "report_time": report_time or _time.now(),
        "state": COMPLETED,
        "resources": {k: str(v) for k, v in resources.items()},
        "metadata": metadata,
        "size": _size(resources),
        "steps_completed": steps,
        "storage_id": storage,
    }
    if (
        storage is not None
        and not conn.execute(
            sa.select(storage_backends.c.id).where(storage_backends.c.id == storage)
        ).first()
    ):
        raise InvalidArgument(
            f"storageId {storage} is not a storage this master registered; send the storageId "
            "that POST /api/v1/runs/start answered, or none"
        )
    old = get(conn, uuid)
    if old is not None:
        if old["resources"] == values["resources"] and old["metadata"] == metadata:
            return  # a retried report
        raise Conflict(f"checkpoint {uuid} was already reported with different content")
    conn.execute(checkpoints.insert().values(uuid=uuid, **values))


def get(conn: sa.Connection, uuid: str) -> CheckpointRow | None:
    row = conn.execute(sa.select(checkpoints).where(checkpoints.c.uuid == uuid)).mappings().first()
    return None if row is None else cast(CheckpointRow, dict(row))


def require(conn: sa.Connection, uuid: str) -> CheckpointRow:
    """The checkpoint's row. Raises NotFound (404) when there is none."""
    ckpt = get(conn, uuid)
    if ckpt is None:
        raise NotFound(f"checkpoint {uuid} not found")
    return ckpt


def update_resources(conn: sa.Connection, uuid: str, resources: dict[str, Any] | None) -> None:
    """After a (partial) delete: no resources left marks the checkpoint DELETED; fewer files
    than it had marks it PARTIALLY_DELETED."""
    if not resources:
        conn.execute(
            checkpoints.update()
            .where(checkpoints.c.uuid == uuid)
            .values(state=DELETED, resources={}, size=0)
        )
        return
    before = conn.execute(
        sa.select(checkpoints.c.resources, checkpoints.c.state).where(checkpoints.c.uuid == uuid)
    ).first()
    values: dict[str, Any] = {
        "resources": {k: str(v) for k, v in resources.items()},
        "size": _size(resources),
    }
    files_before = {k for k in ((before[0] or {}) if before else {}) if not k.endswith("/")}
    if before is not None and files_before - set(resources):
        values["state"] = PARTIALLY_DELETED
    conn.execute(checkpoints.update().where(checkpoints.c.uuid == uuid).values(**values))


def set_metadata(conn: sa.Connection, uuid: str, metadata: dict[str, Any]) -> None:
    """Replace the checkpoint's user metadata (the SDK's ``add_metadata``/``remove_metadata``);
    the copy in its storage is left as it was, as in 0.37."""
    conn.execute(checkpoints.update().where(checkpoints.c.uuid == uuid).values(metadata=metadata))


def of_trial(conn: sa.Connection, trial_id: int) -> list[CheckpointRow]:
    q = (
        sa.select(checkpoints)
        .where(checkpoints.c.trial_id == trial_id)
        .order_by(checkpoints.c.steps_completed, checkpoints.c.report_time)
    )
    return [cast(CheckpointRow, dict(r)) for r in conn.execute(q).mappings()]


def of_trials(conn: sa.Connection, trial_ids: Iterable[int]) -> dict[int, list[CheckpointRow]]:
    """``of_trial`` for many trials: every one of ``trial_ids`` is a key."""
    out: dict[int, list[CheckpointRow]] = {int(t): [] for t in trial_ids}
    for chunk in chunked(out):
        q = (
            sa.select(checkpoints)
            .where(ids_in(checkpoints.c.trial_id, chunk))
            .order_by(checkpoints.c.steps_completed, checkpoints.c.report_time)
        )
        for r in conn.execute(q).mappings():
            out[int(r["trial_id"])].append(cast(CheckpointRow, dict(r)))
    return out


def latest_completed(conn: sa.Connection, trial_id: int) -> CheckpointRow | None:
    """The trial's newest COMPLETED checkpoint by steps_completed (what a restart resumes)."""
    rows = [c for c in of_trial(conn, trial_id) if c["state"] == COMPLETED]
    return rows[-1] if rows else None
