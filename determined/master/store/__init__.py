"""The master's persistent store: SQLAlchemy Core tables, Alembic migrations, and one module
of queries per concern (users, experiments, trials, metrics, checkpoints, logs)."""

from determined.master.store._engine import current_revision, make_engine, migrate, sqlite_url
from determined.master.store._enums import STOPPING, TERMINAL, AllocationState, Partition, State
from determined.master.store._schema import metadata
from determined.master.store._store import Store

__all__ = [
    "STOPPING",
    "TERMINAL",
    "AllocationState",
    "Partition",
    "State",
    "Store",
    "current_revision",
    "make_engine",
    "metadata",
    "migrate",
    "sqlite_url",
]
