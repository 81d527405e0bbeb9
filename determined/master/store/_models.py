"""The model registry: models (unique names) and their numbered versions, each a checkpoint.

A checkpoint that is some model's version is *registered*: checkpoint GC skips it and deleting
it is refused (``registered_uuids``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from determined.master._errors import Conflict, NotFound
from determined.master.store import _time
from determined.master.store._engine import inserted_id
from determined.master.store._schema import model_versions, models


def get_model(conn: sa.Connection, identifier: str | int) -> dict[str, Any] | None:
    """The model named ``identifier``, or (as 0.37) with that id when it is a number."""
    text = str(identifier)
    row = conn.execute(sa.select(models).where(models.c.name == text)).mappings().first()
    # ASCII digits only ("¹".isdigit() too), and no more than a 64-bit id holds.
    if row is None and text.isascii() and text.isdigit() and len(text) <= 18:
        row = conn.execute(sa.select(models).where(models.c.id == int(text))).mappings().first()
    return None if row is None else dict(row)


def require_model(conn: sa.Connection, identifier: str | int) -> dict[str, Any]:
    """The model. Raises NotFound (404)."""
    m = get_model(conn, identifier)
    if m is None:
        raise NotFound(f"model {identifier!r} not found")
    return m


def list_models(conn: sa.Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(sa.select(models).order_by(models.c.id)).mappings()]


def insert_model(
    conn: sa.Connection,
    *,
    name: str,
    user_id: int,
    workspace_id: int,
    description: str = "",
    metadata: dict[str, Any] | None = None,
    labels: list[str] | None = None,
    notes: str = "",
) -> int:
    """A new model. Raises Conflict (409) when the name is taken."""
    if conn.execute(sa.select(models.c.id).where(models.c.name == name)).first():
        raise Conflict(f"a model named {name!r} already exists; pick another name")
    now = _time.now()
    row = conn.execute(
        models.insert().values(
            name=name,
            description=description,
            metadata=metadata or {},
            labels=list(labels or []),
            notes=notes,
            user_id=user_id,
            workspace_id=workspace_id,
            archived=False,
            creation_time=now,
            last_updated_time=now,
        )
    )
    return inserted_id(row)


def update_model(conn: sa.Connection, model_id: int, **values: Any) -> None:
    """Change fields (``last_updated_time`` follows). Raises Conflict for a taken name."""
    if "name" in values:
        q = sa.select(models.c.id).where(models.c.name == values["name"])
        other = conn.execute(q).scalar()
        if other is not None and other != model_id:
            raise Conflict(f"a model named {values['name']!r} already exists; pick another name")
    values["last_updated_time"] = _time.now()
    conn.execute(models.update().where(models.c.id == model_id).values(**values))


def delete_model(conn: sa.Connection, model_id: int) -> None:
    """Remove the model and its versions (the checkpoints stay)."""
    conn.execute(model_versions.delete().where(model_versions.c.model_id == model_id))
    conn.execute(models.delete().where(models.c.id == model_id))


def count_versions(conn: sa.Connection, model_id: int) -> int:
    q = sa.select(sa.func.count()).where(model_versions.c.model_id == model_id)
    return int(conn.execute(q).scalar() or 0)


def versions_of(conn: sa.Connection, model_id: int) -> list[dict[str, Any]]:
    """The model's versions by version number."""
    q = (
        sa.select(model_versions)
        .where(model_versions.c.model_id == model_id)
        .order_by(model_versions.c.version)
    )
    return [dict(r) for r in conn.execute(q).mappings()]


def get_version(conn: sa.Connection, model_id: int, version: int) -> dict[str, Any] | None:
    q = sa.select(model_versions).where(
        model_versions.c.model_id == model_id, model_versions.c.version == version
    )
    row = conn.execute(q).mappings().first()
    return None if row is None else dict(row)


def require_version(conn: sa.Connection, model: dict[str, Any], version: int) -> dict[str, Any]:
    """The version. Raises NotFound (404)."""
    v = get_version(conn, int(model["id"]), version)
    if v is None:
        raise NotFound(f"model {model['name']!r} has no version {version}")
    return v


def insert_version(
    conn: sa.Connection,
    *,
    model_id: int,
    checkpoint_uuid: str,
    user_id: int,
    name: str = "",
    comment: str = "",
    notes: str = "",
    metadata: dict[str, Any] | None = None,
    labels: list[str] | None = None,
) -> int:
    """The model's next version (1 + its highest). Returns its version number."""
    q = sa.select(sa.func.max(model_versions.c.version)).where(
        model_versions.c.model_id == model_id
    )
    number = int(conn.execute(q).scalar() or 0) + 1
    now = _time.now()
    conn.execute(
        model_versions.insert().values(
            model_id=model_id,
            version=number,
            checkpoint_uuid=checkpoint_uuid,
            name=name,
            comment=comment,
            notes=notes,
            metadata=metadata or {},
            labels=list(labels or []),
            user_id=user_id,
            creation_time=now,
            last_updated_time=now,
        )
    )
    conn.execute(models.update().where(models.c.id == model_id).values(last_updated_time=now))
    return number


def update_version(conn: sa.Connection, version_id: int, **values: Any) -> None:
    values["last_updated_time"] = _time.now()
    conn.execute(model_versions.update().where(model_versions.c.id == version_id).values(**values))


def delete_version(conn: sa.Connection, version_id: int) -> None:
    conn.execute(model_versions.delete().where(model_versions.c.id == version_id))


def registered_uuids(conn: sa.Connection, uuids: Iterable[str] | None = None) -> set[str]:
    """Which of ``uuids`` (None: of all checkpoints) are some model's version."""
    q = sa.select(model_versions.c.checkpoint_uuid).distinct()
    if uuids is not None:
        q = q.where(model_versions.c.checkpoint_uuid.in_(list(uuids)))
    return {str(r[0]) for r in conn.execute(q)}


def labels_in_use(conn: sa.Connection) -> list[str]:
    """Every model label, most used first (0.37's ``GET /api/v1/model/labels``)."""
    counts: dict[str, int] = {}
    for (labels,) in conn.execute(sa.select(models.c.labels)):
        for label in labels or []:
            counts[label] = counts.get(label, 0) + 1
    return sorted(counts, key=lambda k: (-counts[k], k))
