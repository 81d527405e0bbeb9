"""Metric reports written together (``ingest.write_reports`` through ``_metrics.ReportBatch``,
as a group commit runs them) leave the database exactly as writing each alone in order does:
rows, merges, conflicts, stale runs, rollbacks of a later run, summaries, validation pointers.
Property-based over sequences of reports on real SQLite files."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import sqlalchemy as sa
from _kit.reports import WHEN, example_trials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from determined.master._errors import ApiError
from determined.master.ingest import Report, ReportOffload, ReportWrite, WriteWorker, write_reports
from determined.master.store import Store, _group_commit, _time, sqlite_url
from determined.master.store._schema import metrics, trials

report = st.tuples(
    st.integers(0, 2),  # which trial of the example
    st.sampled_from(["training", "training", "validation", "inference"]),
    st.integers(-1, 5),  # steps completed (-1 is refused)
    st.dictionaries(
        st.sampled_from(["loss", "acc", "epoch"]),
        st.one_of(st.integers(0, 3), st.sampled_from([0.5, "x"])),
        max_size=2,
    ),
    st.sampled_from([0, 0, 0, 0, 1]),  # 1: the report names the previous run (stale)
    st.booleans(),  # with batchMetrics
)
# Reports none of which is refused: a repeated (trial, group, steps) repeats the same values
# (a merge, not a conflict), so the batch itself writes every one of them.
valid_report = st.tuples(
    st.integers(0, 2),
    st.sampled_from(["training", "training", "validation", "inference"]),
    st.integers(0, 5),
    st.lists(st.sampled_from(["loss", "acc", "epoch"]), max_size=2, unique=True),
    st.just(0),
    st.just(False),
).map(lambda r: (*r[:3], {key: r[2] + len(key) for key in r[3]}, *r[4:]))


def _writes(ids: list[int], seq: list[Any]) -> list[ReportWrite]:
    out = []
    for index, group, steps, avg, stale, with_batch in seq:
        run_id = (2 if index == 2 else 1) - stale
        batch = [avg] if with_batch else None
        report = Report(ids[index], group, run_id, steps, avg, batch, _time.parse(WHEN))
        out.append(ReportWrite(report))
    return out


def _state(store: Store, ids: list[int]) -> Any:
    with store.read() as conn:
        rows = conn.execute(
            sa.select(
                metrics.c.trial_id,
                metrics.c.trial_run_id,
                metrics.c.metric_group,
                metrics.c.steps_completed,
                metrics.c.metrics,
                metrics.c.batch_metrics,
                metrics.c.archived,
            )
            .where(metrics.c.trial_id.in_(ids))
            .order_by(metrics.c.id)
        ).all()
        summaries = conn.execute(
            sa.select(
                trials.c.id,
                trials.c.summary_metrics,
                trials.c.total_batches,
                trials.c.latest_validation_id,
                trials.c.best_validation_id,
            )
            .where(trials.c.id.in_(ids))
            .order_by(trials.c.id)
        ).all()
    return [tuple(r) for r in rows], summaries


def _written_alone(store: Store, ids: list[int], seq: list[Any]) -> list[str]:
    """Each report of ``seq`` written in a transaction of its own: "ok" or its error."""
    outcomes = []
    for w in _writes(ids, seq):
        try:
            with store.tx() as conn:
                w(conn)
            outcomes.append("ok")
        except ApiError as e:
            outcomes.append(f"{type(e).__name__}: {e}")
    return outcomes


def _outcome(write: Any) -> str:
    return "ok" if write.error is None else f"{type(write.error).__name__}: {write.error}"


@pytest.mark.parametrize("all_valid", [False, True], ids=["any", "all-valid"])
def test_reports_written_together_equal_reports_written_alone(
    tmp_path: pathlib.Path, all_valid: bool
) -> None:
    """Any reports (refused ones make the batch fall back to writing each alone), and reports
    none of which is refused (the batch writes them all)."""
    alone_store = Store(sqlite_url(tmp_path / "alone"))
    together_store = Store(sqlite_url(tmp_path / "together"))
    group = _group_commit.GroupCommit(together_store.tx)

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(valid_report if all_valid else report, min_size=1, max_size=12))
    def check(seq: list[Any]) -> None:
        ids = example_trials(alone_store)
        assert example_trials(together_store) == ids
        alone = _written_alone(alone_store, ids, seq)
        batch = [_group_commit._Write(w, write_reports) for w in _writes(ids, seq)]
        group._commit(batch)
        assert [_outcome(w) for w in batch] == alone
        assert _state(together_store, ids) == _state(alone_store, ids)
        if all_valid:
            assert set(alone) == {"ok"}, alone

    check()
    alone_store.close()
    together_store.close()


@pytest.mark.parametrize("all_valid", [False, True], ids=["any", "all-valid"])
def test_reports_offloaded_to_the_write_worker_equal_reports_written_alone(
    tmp_path: pathlib.Path, all_valid: bool
) -> None:
    """The same through the write worker (another process, its own engine), in runs that
    take turns with runs the master commits itself: reports none of which is refused are
    committed there; a refused one rolls the worker's transaction back and the master writes
    that run itself (each alone), with the same outcomes. The worker keeps the trial rows it
    wrote between runs (``_write_worker.kept``) until the master commits something itself."""
    alone_store = Store(sqlite_url(tmp_path / "alone"))
    store = Store(sqlite_url(tmp_path / "offloaded"))
    worker = WriteWorker(store.url, transactions=lambda: store.transactions)
    worker.start()
    assert worker.wait_ready(30)
    offload = ReportOffload(worker, store, None)
    sent = 0
    runs = st.lists(
        st.tuples(
            st.sampled_from(["worker", "worker", "here"]),
            st.lists(valid_report if all_valid else report, min_size=1, max_size=6),
        ),
        min_size=1,
        max_size=4,
    )

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(runs)
    def check(seq: list[tuple[str, list[Any]]]) -> None:
        nonlocal sent
        ids = example_trials(alone_store)
        assert example_trials(store) == ids
        alone = _written_alone(alone_store, ids, [r for _, run in seq for r in run])
        outcomes = []
        for where, run in seq:
            batch = [_group_commit._Write(w, write_reports, offload) for w in _writes(ids, run)]
            if where == "worker":
                store._group._commit_elsewhere(batch, offload)
                sent += len(batch)
            else:
                store._group._commit(batch)
            outcomes += [_outcome(w) for w in batch]
        assert outcomes == alone
        assert _state(store, ids) == _state(alone_store, ids)

    check()
    stats = store.commit_stats.summary()
    assert stats["offloadFailed"] == 0
    assert stats["offloaded"] + stats["offloadRolledBack"] == sent
    if all_valid:
        assert stats["offloaded"] == sent
    else:
        assert stats["offloadRolledBack"] > 0 and stats["offloaded"] > 0
    worker.close()
    alone_store.close()
    store.close()


def test_a_batch_of_valid_reports_takes_few_statements(tmp_path: pathlib.Path) -> None:
    """The point of the batch: 50 new training reports of 10 trials in one transaction cost a
    handful of statements, not four each."""
    store = Store(sqlite_url(tmp_path))
    ids = example_trials(store)[:2]
    seq = [(i % 2, "training", 1 + i // 2, {"loss": float(i)}, 0, False) for i in range(50)]
    statements: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    with store.tx() as conn:
        assert write_reports(conn, list(_writes(ids, seq))) == [None] * 50
    assert len(statements) <= 4, statements
    with store.read() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(metrics)).scalar()
        totals = conn.execute(sa.select(trials.c.total_batches).where(trials.c.id.in_(ids)))
        assert count == 50 and sorted(t for (t,) in totals) == [25, 25]
    store.close()
