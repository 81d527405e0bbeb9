"""SearcherContext and SearcherOperation (docs/reference/harness.md §7; §19 items 30-33)."""

from __future__ import annotations

import pytest
from _kit.core_env import ALLOCATION_ID, TRIAL_ID
from _kit.recording_master import RecordingMaster, Request
from hypothesis import given
from hypothesis import strategies as st

from determined import core
from determined.core._searcher import _parse_searcher_units


@pytest.mark.parametrize(
    ("searcher", "unit"),
    [
        ({"max_length": {"epochs": 3}}, core.Unit.EPOCHS),
        ({"max_length": {"batches": 3}}, core.Unit.BATCHES),
        ({"max_length": {"records": 3}}, core.Unit.RECORDS),
        ({"max_length": {"epochs": 3}, "unit": "batches"}, core.Unit.BATCHES),
        ({"max_length": 3}, None),
        ({}, None),
    ],
)
def test_units_from_config(searcher: dict, unit: core.Unit | None) -> None:
    assert _parse_searcher_units({"searcher": searcher}) == unit


@given(st.dictionaries(st.text(max_size=8), st.integers(), max_size=3))
def test_units_never_crash_on_odd_lengths(length: dict) -> None:
    unit = _parse_searcher_units({"searcher": {"max_length": length}})
    assert unit is None or len(length) == 1


def test_chief_only_keeps_reference_spelling() -> None:
    assert core.SearcherMode.ChiefOnly.value == "CHEIF_ONLY"
    assert core.SearcherMode("CHEIF_ONLY") is core.SearcherMode.ChiefOnly


def test_local_searcher_yields_one_op_of_length_one() -> None:
    with core.init() as ctx:
        assert ctx.searcher.get_configured_units() == core.Unit.EPOCHS
        ops = []
        for op in ctx.searcher.operations():
            ops.append(op.length)
            op.report_progress(0.5)
            op.report_completed(0.1)
        assert ops == [1]


def test_operation_rules() -> None:
    with core.init() as ctx:
        it = ctx.searcher.operations()
        op = next(it)
        op.report_completed(1.0)
        with pytest.raises(RuntimeError, match="only be called once"):
            op.report_completed(1.0)
        op.report_progress(op.length)  # allowed after completion: the final length
        with pytest.raises(RuntimeError, match="after op.report_completed"):
            op.report_progress(0)
        assert list(it) == []


def test_advancing_past_uncompleted_op_raises() -> None:
    with core.init() as ctx:
        it = ctx.searcher.operations()
        next(it)
        with pytest.raises(RuntimeError, match="before the next one"):
            next(it)


def test_worker_operation_cannot_report() -> None:
    op = core.DummySearcherOperation(5, is_chief=False)
    assert isinstance(op, core.SearcherOperation) and op.length == 5
    with pytest.raises(RuntimeError, match="chief"):
        op.report_progress(1)
    with pytest.raises(RuntimeError, match="chief"):
        op.report_completed(1.0)
    chief_op = core.DummySearcherOperation(5, is_chief=True)
    chief_op.report_progress(2.5)
    chief_op.report_completed(1.0)
    with pytest.raises(RuntimeError, match="only be called once"):
        chief_op.report_completed(1.0)


def test_cluster_operations_on_the_wire(cluster_trial: RecordingMaster) -> None:
    lengths = iter([10, 20])

    def next_op(req: Request, _m: object) -> tuple[int, dict]:
        length = next(lengths, None)
        if length is None:
            return 200, {"completed": True}
        return 200, {"op": {"validateAfter": {"length": str(length)}}, "completed": False}

    cluster_trial.route("GET", rf"/api/v1/trials/{TRIAL_ID}/searcher/operation", next_op)
    cluster_trial.route("POST", r"/searcher/completed_operation", {})
    seen = []
    with core.init() as ctx:
        assert ctx.searcher.get_configured_units() == core.Unit.BATCHES
        for op in ctx.searcher.operations():
            seen.append(op.length)
            op.report_progress(op.length / 2)
            op.report_completed(0.5 * op.length)
    assert seen == [10, 20]
    done = [r.body for r in cluster_trial.find("POST", r"/searcher/completed_operation")]
    assert done == [
        {"op": {"length": 10}, "searcherMetric": 5.0},
        {"op": {"length": 20}, "searcherMetric": 10.0},
    ]
    progress = [r.body for r in cluster_trial.find("POST", rf"/trials/{TRIAL_ID}/progress")]
    assert progress == [{"progress": 5.0}, {"progress": 10.0}]
    acks = cluster_trial.find("POST", rf"/allocations/{ALLOCATION_ID}/signals/ack_preemption")
    assert len(acks) == 1  # out of ops, auto_ack
