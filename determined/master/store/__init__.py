"""The master's persistent store: SQLAlchemy Core tables, Alembic migrations, and one module
of queries per concern (users, experiments, trials, metrics, checkpoints, logs)."""

from determined.master.store._engine import current_revision, make_engine, migrate, sqlite_url
from determined.master.store._enums import STOPPING, AllocationState, State
from determined.master.store._rows import (
    AllocationRow,
    CheckpointRow,
    ExperimentRow,
    LiveAllocationRow,
    TrialRow,
)
from determined.master.store._schema import metadata
from determined.master.store._store import Store

__all__ = [
    "STOPPING",
    "AllocationRow",
    "AllocationState",
    "CheckpointRow",
    "ExperimentRow",
    "LiveAllocationRow",
    "State",
    "Store",
    "TrialRow",
    "current_revision",
    "make_engine",
    "metadata",
    "migrate",
    "sqlite_url",
]
