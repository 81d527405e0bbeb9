"""Alembic migrations of the master's store; run by ``Store`` on every start."""
