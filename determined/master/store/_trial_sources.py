"""Trial source infos (0.37): which checkpoint or model version a trial ran inference on, so
that the checkpoint's and the version's metrics routes can find that trial's reports."""

from __future__ import annotations

import sqlalchemy as sa

from determined.master.store._schema import trial_source_infos

TYPES = (
    "TRIAL_SOURCE_INFO_TYPE_UNSPECIFIED",
    "TRIAL_SOURCE_INFO_TYPE_INFERENCE",
    "TRIAL_SOURCE_INFO_TYPE_FINE_TUNING",
)


def record(
    conn: sa.Connection,
    trial_id: int,
    checkpoint_uuid: str,
    kind: str,
    model_id: int | None = None,
    model_version: int | None = None,
) -> None:
    """Link ``trial_id`` to the checkpoint (a second report for the same pair replaces the
    first, where 0.37 refuses it as a duplicate)."""
    t = trial_source_infos.c
    conn.execute(
        trial_source_infos.delete().where(
            (t.trial_id == trial_id) & (t.checkpoint_uuid == checkpoint_uuid)
        )
    )
    conn.execute(
        trial_source_infos.insert().values(
            trial_id=trial_id,
            checkpoint_uuid=checkpoint_uuid,
            trial_source_info_type=kind,
            model_id=model_id,
            model_version=model_version,
        )
    )


def trials_using_checkpoint(conn: sa.Connection, uuid: str, kind: str | None) -> list[int]:
    t = trial_source_infos.c
    q = sa.select(t.trial_id).where(t.checkpoint_uuid == uuid)
    if kind:
        q = q.where(t.trial_source_info_type == kind)
    return [int(r) for r in conn.execute(q.order_by(t.trial_id)).scalars()]


def trials_using_version(
    conn: sa.Connection, model_id: int, version: int, kind: str | None
) -> list[int]:
    t = trial_source_infos.c
    q = sa.select(t.trial_id).where((t.model_id == model_id) & (t.model_version == version))
    if kind:
        q = q.where(t.trial_source_info_type == kind)
    return [int(r) for r in conn.execute(q.order_by(t.trial_id)).scalars()]


def forget(
    conn: sa.Connection, trial_ids: sa.Select[tuple[int]], uuids: sa.Select[tuple[str]]
) -> None:
    """Drop the links of deleted trials and deleted checkpoints."""
    t = trial_source_infos.c
    conn.execute(trial_source_infos.delete().where(t.trial_id.in_(trial_ids)))
    conn.execute(trial_source_infos.delete().where(t.checkpoint_uuid.in_(uuids)))
