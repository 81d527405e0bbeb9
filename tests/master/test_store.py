"""determined/master/store: migrations, durability settings, schema = migrations."""

from __future__ import annotations

import pathlib

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from determined.master.store import Store, current_revision, make_engine, metadata, migrate


def test_migrations_create_the_schema_on_an_empty_db(tmp_path: pathlib.Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    assert current_revision(engine) is None
    migrate(engine)
    assert current_revision(engine) == "0002"
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == [], f"the migrations and _schema.py differ: {diff}"


def test_migrations_are_idempotent_and_state_survives_reopen(tmp_path: pathlib.Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    first = Store(url)
    cluster_id = first.cluster_id
    first.close()
    second = Store(url)  # migrates again: a no-op
    assert second.cluster_id == cluster_id
    assert current_revision(second.engine) == "0002"
    with second.read() as conn:
        names = [r[0] for r in conn.execute(sa.text("SELECT username FROM users ORDER BY id"))]
    assert names == ["determined", "admin"]  # seeded once, not twice


def test_sqlite_runs_in_wal_with_full_sync(tmp_path: pathlib.Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    with store.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "not a url"])
def test_unusable_urls_are_refused_with_a_reason(url: str) -> None:
    with pytest.raises(ValueError, match="database URL|in-memory"):
        make_engine(url)


def test_failed_transaction_leaves_nothing(tmp_path: pathlib.Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    with pytest.raises(RuntimeError), store.tx() as conn:
        conn.execute(sa.text("INSERT INTO cluster_info VALUES ('x', 'y')"))
        raise RuntimeError("boom")
    with store.read() as conn:
        assert (
            conn.execute(sa.text("SELECT count(*) FROM cluster_info WHERE key='x'")).scalar() == 0
        )
