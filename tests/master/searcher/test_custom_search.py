"""The master's custom search, pure part (determined/master/searcher/_custom.py): the searcher
event queue (ids, acknowledgements, snapshots) and the checks on the operations a runner
posts."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.errors import SearcherEventRejected
from determined.master.searcher import (
    Close,
    Create,
    CustomSearch,
    EventQueue,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    make_search_method,
    restore_search_method,
)

# A step: push one event, or acknowledge an id (maybe pending, maybe not).
_steps = st.lists(
    st.one_of(st.just(("push", 0)), st.tuples(st.just("ack"), st.integers(-2, 40))),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_steps)
def test_queue_ids_increase_and_acks_drop_a_prefix(steps: list[tuple[str, int]]) -> None:
    queue = EventQueue()
    pending: list[int] = []  # the model: ids not yet acknowledged
    issued = 0
    for kind, arg in steps:
        if kind == "push":
            event = queue.push({"trialClosed": {"requestId": "r"}})
            issued += 1
            assert event["id"] == issued  # ids count from 1 and are never reused
            pending.append(issued)
        elif arg in pending:
            queue.ack(arg)
            pending = [i for i in pending if i > arg]
        else:
            before = queue.state()
            with pytest.raises(SearcherEventRejected, match="not pending"):
                queue.ack(arg)
            assert queue.state() == before  # a refused ack changes nothing
        assert [e["id"] for e in queue.events] == pending
        # the snapshot (what the master commits) restores the same queue
        again = EventQueue.from_state(json.loads(json.dumps(queue.state())))
        assert again.state() == queue.state()
        assert again.count == issued


def _rid() -> str:
    return str(uuid.uuid4())


def _create(rid: str, hparams: object = None) -> dict:
    return {"createTrial": {"requestId": rid, "hyperparams": json.dumps(hparams or {"x": 1})}}


def test_events_are_queued_in_v1_shapes() -> None:
    method = make_search_method({"name": "custom", "metric": "loss"}, None, 3)
    assert isinstance(method, CustomSearch)
    assert method.initial_operations() == []
    rid = _rid()
    ops = method.apply_operations([_create(rid)], triggered_by=1)
    assert len(ops) == 1 and isinstance(ops[0], Create) and ops[0].hparams == {"x": 1}
    assert method.on_trial_created(rid) == []
    assert method.on_validation_completed(rid, float("nan"), 5) == []
    assert method.on_trial_exited_early(rid, ExitedReason.USER_CANCELED) == []
    method.on_trial_progress(rid, 2.5)
    assert method.on_trial_closed(rid) == []
    assert method.events() == [
        {"id": 2, "trialCreated": {"requestId": rid}},
        {
            "id": 3,
            "validationCompleted": {"requestId": rid, "metric": "NaN", "validateAfterLength": "5"},
        },
        {
            "id": 4,
            "trialExitedEarly": {
                "requestId": rid,
                "exitedReason": "EXITED_REASON_USER_REQUESTED_STOP",
            },
        },
        {"id": 5, "trialProgress": {"requestId": rid, "partialUnits": 2.5}},
        {"id": 6, "trialClosed": {"requestId": rid}},
    ]
    # a master restart: the same search, queue included, from the committed snapshot
    again = restore_search_method(
        {"name": "custom", "metric": "loss"}, None, json.loads(json.dumps(method.snapshot()))
    )
    assert isinstance(again, CustomSearch)
    assert again.events() == method.events()
    assert again.snapshot() == method.snapshot()


def test_operations_are_checked_before_anything_changes() -> None:
    method = CustomSearch(0)
    method.initial_operations()
    rid = _rid()
    before = method.snapshot()
    bad = [
        ([{"createTrial": {"requestId": "not-a-uuid", "hyperparams": "{}"}}], "UUID"),
        ([{"createTrial": {"requestId": rid, "hyperparams": "{oops"}}], "not valid JSON"),
        ([{"createTrial": {"requestId": rid, "hyperparams": "[1]"}}], "JSON object"),
        ([_create(rid), _create(rid)], "already used"),
        ([{"closeTrial": {"requestId": _rid()}}], "names no trial"),
        (
            [
                _create(rid),
                {"trialOperation": {"validateAfter": {"requestId": rid, "length": 2**63}}},
            ],
            "integer from 1",
        ),
        (
            [_create(rid), {"trialOperation": {"validateAfter": {"requestId": rid, "length": 0}}}],
            "integer from 1",
        ),
        ([{"shutDown": {}, "closeTrial": {"requestId": rid}}], "exactly one"),
        ([{}], "exactly one"),
        ([{"setSearcherProgress": {"progress": "half"}}], "number"),
    ]
    for ops, needle in bad:
        with pytest.raises(SearcherEventRejected, match=needle):
            method.apply_operations(ops, triggered_by=1)
        assert method.snapshot() == before
    with pytest.raises(SearcherEventRejected, match="not pending"):
        method.apply_operations([_create(rid)], triggered_by=7)
    assert method.snapshot() == before


def test_operations_in_order_and_void_ones_dropped() -> None:
    method = CustomSearch(0)
    method.initial_operations()
    a, b = _rid(), _rid()
    posted = [
        _create(a, {"lr": 0.1}),
        {"trialOperation": {"validateAfter": {"requestId": a, "length": "4"}}},
        _create(b),
        {"setSearcherProgress": {"progress": 1.5}},
        {"closeTrial": {"requestId": b}},
    ]
    ops = method.apply_operations(posted, triggered_by=1)
    assert [type(o) for o in ops] == [Create, ValidateAfter, Create, Close]
    assert ops[1] == ValidateAfter(a, 4)
    assert method.progress({}) == 1.0  # clamped to [0, 1]
    assert method.events() == []  # event 1 acknowledged
    method.on_trial_closed(b)
    # work for a closed trial is dropped; a second Shutdown is dropped
    ops = method.apply_operations(
        [
            {"trialOperation": {"validateAfter": {"requestId": b, "length": "2"}}},
            {"shutDown": {"cancel": True}},
            {"shutDown": {"failure": True}},
        ],
        triggered_by=None,
    )
    assert ops == [Shutdown(cancel=True)]
    with pytest.raises(SearcherEventRejected, match="already used"):
        method.apply_operations([_create(a)], triggered_by=None)
