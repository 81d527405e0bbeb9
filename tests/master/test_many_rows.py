"""``_engine.ManyRows`` (the group commit's insert of metric rows and update of trials, past
SQLAlchemy's per-row work) stores exactly what ``conn.execute(stmt, rows)`` stores, on SQLite
and PostgreSQL: the same text of every column, JSON and times included. Property-based over
rows of any JSON-able metrics, report times in any time zone, and both booleans."""

from __future__ import annotations

import datetime
import pathlib
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from determined.master.store import Store, _experiments, _trials, sqlite_url
from determined.master.store._engine import ManyRows
from determined.master.store._enums import State
from determined.master.store._metrics import ROW_KEYS
from determined.master.store._schema import metrics, trials, users

pytestmark = pytest.mark.both_stores

json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**53), 2**53),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
report_time = st.datetimes(
    min_value=datetime.datetime(1970, 1, 2),
    max_value=datetime.datetime(2200, 1, 1),
    timezones=st.sampled_from(
        [datetime.timezone.utc, datetime.timezone(datetime.timedelta(hours=-7, minutes=-30))]
    ),
)
row = st.fixed_dictionaries(
    {
        "trial_run_id": st.integers(1, 3),
        "partition": st.sampled_from(["TRAINING", "VALIDATION", "GENERIC"]),
        "steps_completed": st.integers(0, 2**40),
        "metrics": st.dictionaries(st.text(max_size=6), json_value, max_size=4),
        # Bounded as "metrics" is: unbounded lists of dicts of JSON made drawing the rows ~80%
        # of this module's time, and a longer array is stored no differently.
        "batch_metrics": st.none()
        | st.lists(st.dictionaries(st.text(max_size=3), json_value, max_size=4), max_size=4),
        "report_time": report_time,
        "archived": st.booleans(),
    }
)


@pytest.fixture
def store(tmp_path: pathlib.Path, db_url: str | None) -> Any:
    s = Store(db_url or sqlite_url(tmp_path))
    yield s
    s.close()


def _trial(store: Store) -> int:
    with store.tx() as conn:
        exp = _experiments.insert_experiment(
            conn, config={}, original_config="", model_definition=None, owner_id=1
        )
        return _trials.insert_trial(
            conn, experiment_id=exp, request_id="r", hparams={}, seed=0, state=State.ACTIVE
        )


def _as_text(conn: sa.Connection, table: sa.Table, where: Any, order: Any) -> list[tuple[Any, ...]]:
    """Every column but the id as the database's own text of it."""
    columns = [sa.cast(c, sa.Text) for c in table.c if c.name != "id"]
    return [tuple(r) for r in conn.execute(sa.select(*columns).where(where).order_by(order))]


def _of(trial: int, group: str) -> Any:
    return sa.and_(metrics.c.trial_id == trial, metrics.c.metric_group == group)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(row, min_size=1, max_size=6))
def test_inserted_rows_equal_sqlalchemys(store: Store, rows: list[dict[str, Any]]) -> None:
    trial = _trial(store)
    many = ManyRows(metrics.insert(), ROW_KEYS)
    with store.tx() as conn:
        many.run(conn, [{**r, "trial_id": trial, "metric_group": "many"} for r in rows])
        conn.execute(
            metrics.insert(), [{**r, "trial_id": trial, "metric_group": "core"} for r in rows]
        )
        by_many = _as_text(conn, metrics, _of(trial, "many"), metrics.c.id)
        by_core = _as_text(conn, metrics, _of(trial, "core"), metrics.c.id)
    assert len(by_many) == len(rows)
    group = [c.name for c in metrics.c if c.name != "id"].index("metric_group")
    assert [r[:group] + r[group + 1 :] for r in by_many] == [
        r[:group] + r[group + 1 :] for r in by_core
    ]
    with store.read() as conn:  # and they read back as the rows given
        stored = conn.execute(sa.select(metrics).where(_of(trial, "many")).order_by(metrics.c.id))
        for given_row, back in zip(rows, stored.mappings(), strict=True):
            assert back["metrics"] == given_row["metrics"]
            assert back["batch_metrics"] == given_row["batch_metrics"]
            assert back["archived"] is given_row["archived"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    summary=st.dictionaries(st.text(max_size=6), json_value, max_size=4),
    total=st.integers(0, 2**40),
)
def test_updated_trials_equal_sqlalchemys(
    store: Store, summary: dict[str, Any], total: int
) -> None:
    a, b = _trial(store), _trial(store)
    stmt = trials.update().where(trials.c.id == sa.bindparam("trial_row_id"))
    values = {"summary_metrics": summary, "total_batches": total}
    with store.tx() as conn:
        ManyRows(stmt, ("summary_metrics", "total_batches", "trial_row_id")).run(
            conn, [{**values, "trial_row_id": a}]
        )
        conn.execute(stmt, [{**values, "trial_row_id": b}])
        written = [
            sa.cast(trials.c.summary_metrics, sa.Text),
            sa.cast(trials.c.total_batches, sa.Text),
        ]
        text_a = conn.execute(sa.select(*written).where(trials.c.id == a)).one()
        text_b = conn.execute(sa.select(*written).where(trials.c.id == b)).one()
    assert tuple(text_a) == tuple(text_b)
    with store.read() as conn:
        got = conn.execute(sa.select(trials.c.summary_metrics).where(trials.c.id == a)).scalar()
    assert got == summary


def test_a_statement_with_values_it_would_compute_is_refused(store: Store) -> None:
    """A column default (``users.admin``) left out of the keys would be computed per row by
    SQLAlchemy; ManyRows cannot, and says so instead of storing NULL."""
    many = ManyRows(users.insert(), ("username",))
    with store.tx() as conn, pytest.raises(ValueError, match="admin"):
        many.run(conn, [{"username": "x"}])


def test_no_rows_runs_nothing(store: Store) -> None:
    with store.tx() as conn:
        ManyRows(metrics.insert(), ("trial_id",)).run(conn, [])  # would fail if it ran


def test_a_bad_row_fails_the_whole_run_with_sqlalchemys_error(store: Store) -> None:
    """A row the database refuses (no such trial) raises what ``conn.execute`` raises, and
    the transaction stores none of the rows (on PostgreSQL they go in by COPY)."""
    trial = _trial(store)
    good = {k: None for k in ROW_KEYS} | {
        "trial_id": trial,
        "trial_run_id": 1,
        "metric_group": "bad-run",
        "partition": "TRAINING",
        "steps_completed": 1,
        "metrics": {"loss": 1.0},
        "report_time": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
        "archived": False,
    }
    rows = [good, {**good, "trial_id": trial + 1000, "steps_completed": 2}, good]
    with pytest.raises(sa.exc.IntegrityError), store.tx() as conn:
        ManyRows(metrics.insert(), ROW_KEYS).run(conn, rows)
    with store.read() as conn:
        assert conn.execute(sa.select(metrics.c.id).where(_of(trial, "bad-run"))).all() == []
    with store.tx() as conn:  # the connection went back to the pool fit for the next write
        ManyRows(metrics.insert(), ROW_KEYS).run(conn, [good])
    with store.read() as conn:
        assert len(conn.execute(sa.select(metrics.c.id).where(_of(trial, "bad-run"))).all()) == 1
