"""Moving a master's whole history from one database to another (``det master
migrate-store``): SQLite to PostgreSQL, typically, when a team outgrows one machine.

Both sides are brought to the newest schema first, then every table is copied in foreign-key
order inside one transaction on the target, so a failure leaves the target as empty as it
was. Timestamps SQLite hands back without a zone are UTC (the store wrote them so); PostgreSQL's
id sequences are moved past the copied ids so new rows do not collide.
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa

from determined.master.store._engine import current_revision, make_engine, migrate
from determined.master.store._schema import experiments, metadata, users

BATCH = 1000


class TargetNotEmptyError(ValueError):
    """The target database holds a master's history already: copying could mix two."""


def _holds_history(engine: sa.Engine) -> bool:
    """Whether a master ever ran on it (it seeds users) or anything was copied into it. A
    schema alone (a copy that failed and rolled back) does not count."""
    if current_revision(engine) is None:
        return False
    with engine.connect() as conn:
        return any(
            conn.execute(sa.select(sa.func.count()).select_from(t)).scalar()
            for t in (users, experiments)
        )


def _utc_datetimes(table: sa.Table, row: dict[str, Any]) -> dict[str, Any]:
    for column in table.columns:
        value = row.get(column.name)
        if isinstance(value, datetime.datetime) and value.tzinfo is None:
            row[column.name] = value.replace(tzinfo=datetime.timezone.utc)
    return row


def _advance_sequences(conn: sa.Connection) -> None:
    """PostgreSQL: each serial id's sequence continues after the largest copied id."""
    if conn.dialect.name != "postgresql":
        return
    for table in metadata.sorted_tables:
        for column in table.primary_key.columns:
            if not isinstance(column.type, sa.Integer) or column.autoincrement is False:
                continue
            sequence = conn.execute(
                sa.text("SELECT pg_get_serial_sequence(:t, :c)"),
                {"t": table.name, "c": column.name},
            ).scalar()
            if sequence is None:
                continue
            highest = conn.execute(sa.select(sa.func.max(column))).scalar()
            if highest is not None:
                conn.execute(sa.select(sa.func.setval(sequence, highest)))


def copy_store(source_url: str, target_url: str) -> dict[str, int]:
    """Copy every row of the store at ``source_url`` into the empty database at
    ``target_url``; the number of rows per table.

    Raises:
        TargetNotEmptyError: the target holds users or experiments (another history).
        ValueError: a URL cannot be used.
        RuntimeError: a table's row count differs after the copy (nothing is committed).
    """
    source = make_engine(source_url)
    target = make_engine(target_url)
    try:
        if _holds_history(target):
            raise TargetNotEmptyError(
                f"the target database {target.url.render_as_string()} already holds a master's "
                "history; give an empty database (createdb NAME) so two histories never mix"
            )
        migrate(source)
        migrate(target)
        counts: dict[str, int] = {}
        with source.connect() as src, target.begin() as dst:
            # Rows a migration may have seeded go: the source's rows replace them.
            for table in reversed(metadata.sorted_tables):
                dst.execute(table.delete())
            for table in metadata.sorted_tables:
                copied = 0
                result = src.execution_options(stream_results=True).execute(sa.select(table))
                for chunk in result.mappings().partitions(BATCH):
                    dst.execute(table.insert(), [_utc_datetimes(table, dict(r)) for r in chunk])
                    copied += len(chunk)
                there = dst.execute(sa.select(sa.func.count()).select_from(table)).scalar()
                if there != copied:
                    raise RuntimeError(f"{table.name}: copied {copied} rows, found {there}")
                counts[table.name] = copied
            _advance_sequences(dst)
        return counts
    finally:
        source.dispose()
        target.dispose()
