"""determined/master/store: migrations, durability settings, schema = migrations."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from determined.master.store import Store, current_revision, make_engine, metadata, migrate

pytestmark = pytest.mark.both_stores  # tests taking db_url: SQLite and PostgreSQL


def _url(db_url: str | None, tmp_path: pathlib.Path) -> str:
    return db_url or f"sqlite:///{tmp_path / 'm.db'}"


def test_migrations_create_the_schema_on_an_empty_db(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    engine = make_engine(_url(db_url, tmp_path))
    assert current_revision(engine) is None
    migrate(engine)
    assert current_revision(engine) == "0026"
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == [], f"the migrations and _schema.py differ: {diff}"


def test_migrations_are_idempotent_and_state_survives_reopen(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    url = _url(db_url, tmp_path)
    first = Store(url)
    cluster_id = first.cluster_id
    first.close()
    second = Store(url)  # migrates again: a no-op
    assert second.cluster_id == cluster_id
    assert current_revision(second.engine) == "0026"
    with second.read() as conn:
        names = [r[0] for r in conn.execute(sa.text("SELECT username FROM users ORDER BY id"))]
    assert names == ["admin", "determined"]  # seeded once, not twice


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


def test_failed_transaction_leaves_nothing(tmp_path: pathlib.Path, db_url: str | None) -> None:
    store = Store(_url(db_url, tmp_path))
    with pytest.raises(RuntimeError), store.tx() as conn:
        conn.execute(sa.text("INSERT INTO cluster_info VALUES ('x', 'y')"))
        raise RuntimeError("boom")
    with store.read() as conn:
        assert (
            conn.execute(sa.text("SELECT count(*) FROM cluster_info WHERE key='x'")).scalar() == 0
        )


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u:secret@db.example/det", "postgresql+psycopg"),
        ("postgres://u@db.example:5433/det", "postgresql+psycopg"),
        ("postgresql+psycopg2://u@db.example/det", "postgresql+psycopg2"),
    ],
)
def test_postgres_urls_get_psycopg_unless_they_name_a_driver(url: str, driver: str) -> None:
    try:
        engine = make_engine(url)  # no connection is made until first use
    except ValueError as e:  # psycopg2 is not a dependency: the error names the extra
        assert driver.endswith("psycopg2") and "redetermined[postgres]" in str(e)
        assert "secret" not in str(e)
        return
    assert engine.url.drivername == driver
    engine.dispose()


def test_a_failed_copy_leaves_no_rows_and_can_be_run_again(
    tmp_path: pathlib.Path, postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from determined.master.store import _copy

    source = f"sqlite:///{tmp_path / 'm.db'}"
    Store(source).close()  # a history: the seeded users and cluster id
    target = postgres_server.new_database()

    def broken(conn: sa.Connection) -> None:
        raise RuntimeError("the network went away")

    monkeypatch.setattr(_copy, "_advance_sequences", broken)
    with pytest.raises(RuntimeError, match="network"):
        _copy.copy_store(source, target)
    engine = make_engine(target)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM users")).scalar() == 0
    engine.dispose()

    monkeypatch.undo()
    counts = _copy.copy_store(source, target)
    assert counts["users"] == 2 and counts["cluster_info"] >= 1
    with pytest.raises(_copy.TargetNotEmptyError, match="already holds"):
        _copy.copy_store(source, target)


def test_a_new_store_seeds_admin_and_determined_with_0_37s_ids(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    store = Store(_url(db_url, tmp_path))
    with store.read() as conn:
        rows = conn.execute(sa.text("SELECT id, username, admin FROM users ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [(1, "admin", True), (2, "determined", False)]
    store.close()
