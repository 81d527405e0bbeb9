"""Alembic environment: always given an open connection by ``_engine.migrate``."""

from __future__ import annotations

from alembic import context

from determined.master.store._schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
