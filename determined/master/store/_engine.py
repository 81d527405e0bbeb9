"""Opening the database: SQLite durability settings, any other SQLAlchemy URL as given, and
the Alembic upgrade run on every start."""

from __future__ import annotations

import functools
import json
import operator
import pathlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import pydantic_core
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

_MIGRATIONS = pathlib.Path(__file__).parent / "_migrations"


def sqlite_url(data_dir: pathlib.Path) -> str:
    """The default database: ``master.db`` in the master's data dir."""
    return f"sqlite:///{data_dir / 'master.db'}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL + FULL: a commit is on disk before the master answers, so kill -9 loses nothing
    # acknowledged; readers never block the writer.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


# Ids per ``IN (...)`` of a bulk read: SQLite before 3.32 takes at most 999 parameters.
IN_CHUNK = 500


def chunked(ids: Iterable[int]) -> Iterator[list[int]]:
    """``ids`` (deduplicated, sorted) in lists short enough for one ``IN (...)``."""
    ordered = sorted(set(ids))
    for i in range(0, len(ordered), IN_CHUNK):
        yield ordered[i : i + IN_CHUNK]


def rows_by_id(
    conn: sa.Connection, table: sa.Table, ids: Iterable[int]
) -> dict[int, dict[str, Any]]:
    """The rows of ``table`` whose ``id`` is among ``ids`` (those that exist), by id."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in chunked(ids):
        for r in conn.execute(sa.select(table).where(ids_in(table.c.id, chunk))).mappings():
            out[int(r["id"])] = dict(r)
    return out


def ids_in(column: sa.Column[Any], ids: list[int]) -> sa.ColumnElement[bool]:
    """``column IN (ids)`` with the ids written into the statement. SQLAlchemy's expanding
    ``in_`` rewrites the statement for each run at ~8 us per id (1.6 ms for 200 ids, most of
    an experiment list's time); integers written as SQL cannot inject anything."""
    if not ids:
        return sa.false()
    listed = ",".join(str(int(i)) for i in ids)
    return sa.literal_column(f"{column.table.name}.{column.name}").op("IN")(
        sa.literal_column(f"({listed})")
    )


def json_text(value: Any) -> str:
    """The JSON text of a JSON column's value, as ``json.dumps`` would write it but without
    its spaces: NaN and the infinities as ``NaN``/``Infinity``, keys made strings, tuples as
    lists. Past ``json.dumps``'s per-call work: encoding a trial's summary and a report's
    metrics was a fifth of the write worker's CPU per report (``benchmarks/master_metrics.py``).
    What pydantic's encoder cannot write (a lone surrogate) is written by ``json.dumps``."""
    try:
        return pydantic_core.to_json(value, inf_nan_mode="constants").decode()
    except pydantic_core.PydanticSerializationError:
        return json.dumps(value)


def make_engine(url: str) -> sa.Engine:
    """An engine for ``url``: ``sqlite:///path``, or ``postgresql://user:pass@host/db`` (also
    ``postgres://``; psycopg 3 unless the URL names another driver, such as
    ``postgresql+psycopg2://``), or any other SQLAlchemy URL.

    Raises:
        ValueError: the URL cannot be parsed or names an in-memory SQLite database (the master
            is several threads and must survive restarts; use a file), or PostgreSQL's driver
            is not installed.
    """
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as e:
        raise ValueError(f"cannot parse database URL {url!r}: {e}") from e
    backend = parsed.get_backend_name()
    if backend == "postgres":  # the libpq spelling; SQLAlchemy knows only "postgresql"
        parsed = parsed.set(drivername="postgresql")
        backend = "postgresql"
    if backend == "postgresql":
        if parsed.drivername == "postgresql":  # no driver named: psycopg 3, our extra
            parsed = parsed.set(drivername="postgresql+psycopg")
        try:
            return sa.create_engine(
                parsed,
                pool_pre_ping=True,
                pool_size=10,
                max_overflow=20,
                json_serializer=json_text,
            )
        except ModuleNotFoundError as e:
            raise ValueError(
                f"database URL {parsed.render_as_string()!r} needs the PostgreSQL driver "
                f"({e.name} is not installed): pip install 'redetermined[postgres]'"
            ) from e
    if backend != "sqlite":
        return sa.create_engine(parsed, pool_pre_ping=True, json_serializer=json_text)
    if not parsed.database or parsed.database == ":memory:":
        raise ValueError(
            f"database URL {url!r} is an in-memory SQLite database; the master needs a file, "
            "for example sqlite:////path/to/master.db"
        )
    pathlib.Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    # Connections are kept, not reopened (each open runs the pragmas): as many as the thread
    # pool may read with at once.
    engine = sa.create_engine(
        parsed,
        connect_args={"timeout": 30},
        pool_size=20,
        max_overflow=60,
        json_serializer=json_text,
    )
    sa.event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def migrate(engine: sa.Engine) -> None:
    """Bring the schema to the newest revision; a no-op when it already is."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at (None: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def inserted_id(result: sa.CursorResult[Any]) -> int:
    """The primary key of the row an INSERT just added."""
    key = result.inserted_primary_key
    if key is None:
        raise RuntimeError("the INSERT returned no primary key")
    return int(key[0])


class ManyRows:
    """One INSERT or UPDATE run for many rows through the driver's ``executemany``, past
    SQLAlchemy's per-execution work (the compiled-cache lookup, ``construct_params`` and its
    generic bind processing of every row: most of a group commit's CPU above SQLite). On
    PostgreSQL an INSERT's rows go in by ``COPY`` instead (see ``_copy``).

    The statement is compiled once per dialect, and each value still goes through its column
    type's own bind processor for that dialect, so the rows stored are the rows
    ``conn.execute(stmt, rows)`` would store (``tests/master/test_many_rows.py``).

    Args:
        stmt: the statement; every bind parameter it has must be one of ``keys``.
        keys: the keys of each row given to :meth:`run`: columns to insert or SET, and the
            statement's named bind parameters (a WHERE's ``bindparam``).
    """

    def __init__(self, stmt: sa.Insert | sa.Update, keys: Iterable[str]) -> None:
        self._stmt = stmt
        self._keys = list(keys)
        self._compiled: dict[str, tuple[str, list[tuple[str, Any]], bool]] = {}
        # An INSERT of table columns only: on PostgreSQL (psycopg) its rows go in by COPY.
        self._copy_columns: list[str] | None = None
        if isinstance(stmt, sa.Insert) and all(k in stmt.table.c for k in self._keys):
            self._copy_columns = list(self._keys)

    def run(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
        """Write ``rows`` (each with exactly the ``keys``) in ``conn``'s transaction."""
        if not rows:
            return
        sql, processors, positional = self._for(conn.dialect)
        if self._copy_columns is not None and conn.dialect.driver == "psycopg":
            self._copy(conn, rows, processors)
            return
        params: list[Any] = self._values(rows, processors)
        if not positional:
            names = [k for k, _ in processors]
            params = [dict(zip(names, values, strict=True)) for values in params]
        conn.exec_driver_sql(sql, params)

    @staticmethod
    def _values(rows: list[dict[str, Any]], processors: list[tuple[str, Any]]) -> list[Any]:
        """Each row's values in the statement's order, each through its processor: the
        columns taken at once, then only those with a processor changed (a generator over
        every column of every row was a third of the write worker's CPU)."""
        keys = [k for k, _ in processors]
        take: Callable[[dict[str, Any]], Any] = operator.itemgetter(*keys)
        if len(keys) == 1:  # itemgetter of one key gives the value, not a tuple
            take = functools.partial(_one, keys[0])
        processed = [(i, p) for i, (_, p) in enumerate(processors) if p is not None]
        if not processed:
            return [take(row) for row in rows]
        out = []
        for row in rows:
            values = list(take(row))
            for i, p in processed:
                values[i] = p(values[i])
            out.append(tuple(values))  # SQLAlchemy takes tuples (or dicts) only
        return out

    def _copy(
        self, conn: sa.Connection, rows: list[dict[str, Any]], processors: list[tuple[str, Any]]
    ) -> None:
        """The INSERT's rows by ``COPY ... FROM STDIN``, in order (the ids come in the same
        order): PostgreSQL parses and plans no statement per row, as executemany has it do
        (half a group commit's time on a 300-report batch, ``benchmarks/master_metrics.py
        --postgres``). Each value goes through its bind processor as in :meth:`run`."""
        stmt = cast(sa.Insert, self._stmt)
        quote = conn.dialect.identifier_preparer
        table = quote.format_table(stmt.table)
        names = [n for n, _ in processors]
        columns = ", ".join(quote.quote(stmt.table.c[n].name) for n in names)
        sql = f"COPY {table} ({columns}) FROM STDIN"
        dbapi_error = conn.dialect.loaded_dbapi.Error
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            with cursor.copy(sql) as copy:
                for values in self._values(rows, processors):
                    copy.write_row(values)
        except dbapi_error as e:  # as SQLAlchemy raises the driver's errors (IntegrityError ...)
            raise sa.exc.DBAPIError.instance(sql, None, e, dbapi_error, dialect=conn.dialect) from e
        finally:
            cursor.close()

    def _for(self, dialect: sa.Dialect) -> tuple[str, list[tuple[str, Any]], bool]:
        found = self._compiled.get(dialect.name)
        if found is None:
            compiled = self._stmt.compile(
                dialect=dialect, column_keys=self._keys, for_executemany=True
            )
            names = (
                list(compiled.positiontup or []) if compiled.positional else list(compiled.binds)
            )
            extra = set(names) - set(self._keys)
            if extra:  # a default or onupdate value SQLAlchemy would compute per row
                raise ValueError(f"the statement has bind parameters {sorted(extra)} not in keys")
            processors = [
                (n, compiled.binds[n].type.dialect_impl(dialect).bind_processor(dialect))
                for n in names
            ]
            found = (compiled.string, processors, bool(compiled.positional))
            self._compiled[dialect.name] = found
        return found


def _one(key: str, row: dict[str, Any]) -> tuple[Any]:
    return (row[key],)
