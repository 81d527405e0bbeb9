"""``SearcherBase.reopen``: ``det e continue`` makes the ended trial of a single search live
again. It replaces the master's former surgery on the stored snapshot; the two must agree
exactly, snapshot for snapshot and operation for operation, so that searches stored by either
continue the same way."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.errors import SearcherEventRejected
from determined.master.searcher import (
    Create,
    ExitedReason,
    SearcherBase,
    Shutdown,
    make_search_method,
    restore_search_method,
)

HP = {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}}


def surgery(snapshot: dict[str, Any], request_id: str, length: int) -> dict[str, Any]:
    """What the master did to a snapshot before ``reopen`` existed (kept here as the oracle)."""
    return {
        **snapshot,
        "shutdown": False,
        "closed": [r for r in snapshot["closed"] if r != request_id],
        "exits": {r: why for r, why in snapshot["exits"].items() if r != request_id},
        "outstanding": {**snapshot["outstanding"], request_id: [length]},
        "completed": [k for k in snapshot["completed"] if k != f"{request_id}:{length}"],
    }


def ended_single_search(length: int, ending: str) -> tuple[SearcherBase, str]:
    """A single search whose trial trained to ``length`` and ended as ``ending`` says."""
    method = make_search_method({"name": "single", "metric": "m", "max_length": length}, HP, 7)
    ops = method.initial_operations()
    create = next(op for op in ops if isinstance(op, Create))
    rid = create.request_id
    method.on_trial_created(rid)
    if ending == "completed":
        method.on_validation_completed(rid, 0.5, length)
    elif ending == "errored":
        method.on_trial_exited_early(rid, ExitedReason.ERRORED)
    elif ending == "canceled":
        method.on_trial_exited_early(rid, ExitedReason.USER_CANCELED)
    ops = method.on_trial_closed(rid)
    assert any(isinstance(op, Shutdown) for op in ops)
    return method, rid


def continue_with_reopen(method: SearcherBase, rid: str, new_length: int) -> SearcherBase:
    config = {"name": "single", "metric": "m", "max_length": new_length}
    again = restore_search_method(config, HP, json.loads(json.dumps(method.snapshot())))
    again.reopen(rid, new_length)
    return again


def continue_with_surgery(method: SearcherBase, rid: str, new_length: int) -> SearcherBase:
    config = {"name": "single", "metric": "m", "max_length": new_length}
    return restore_search_method(config, HP, surgery(method.snapshot(), rid, new_length))


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(1, 50),
    extra=st.integers(0, 50),
    ending=st.sampled_from(["completed", "errored", "canceled"]),
    second_ending=st.sampled_from(["completed", "errored"]),
)
def test_reopen_equals_the_old_snapshot_surgery(
    length: int, extra: int, ending: str, second_ending: str
) -> None:
    new_length = length + extra
    method, rid = ended_single_search(length, ending)
    reopened = continue_with_reopen(method, rid, new_length)
    oracle = continue_with_surgery(method, rid, new_length)
    assert reopened.snapshot() == oracle.snapshot()
    assert not reopened.is_shut_down
    assert reopened.progress({rid: length}) == oracle.progress({rid: length})

    # The continued trial's next events give the same operations and states on both.
    def finish(m: SearcherBase) -> list[Any]:
        if second_ending == "completed":
            ops = m.on_validation_completed(rid, 0.25, new_length)
        else:
            ops = m.on_trial_exited_early(rid, ExitedReason.ERRORED)
        return ops + m.on_trial_closed(rid)

    ops = finish(reopened)
    assert ops == finish(oracle)
    assert reopened.snapshot() == oracle.snapshot()
    assert ops[-1] == Shutdown(cancel=False, failure=second_ending == "errored")


def test_a_reopened_trial_owes_exactly_the_new_length() -> None:
    method, rid = ended_single_search(4, "completed")
    again = continue_with_reopen(method, rid, 8)
    with pytest.raises(SearcherEventRejected, match="already completed"):
        again.on_validation_completed(rid, 0.1, 4)
    assert again.on_validation_completed(rid, 0.1, 8) == []
    assert again.progress({rid: 4}) == 0.5
    ops = again.on_trial_closed(rid)
    assert ops == [Shutdown(cancel=False, failure=False)]


def test_reopen_refuses_a_trial_the_search_never_created() -> None:
    method, _ = ended_single_search(4, "completed")
    with pytest.raises(SearcherEventRejected, match="never created"):
        method.reopen("no-such-request", 8)


def test_reopen_changes_no_other_trial() -> None:
    config = {"name": "random", "metric": "m", "max_length": 3, "max_trials": 2}
    method = make_search_method(config, HP, 3)
    creates = [op for op in method.initial_operations() if isinstance(op, Create)]
    for c in creates:
        method.on_trial_created(c.request_id)
        method.on_validation_completed(c.request_id, 0.5, 3)
        method.on_trial_closed(c.request_id)
    first, second = (c.request_id for c in creates)
    method.reopen(first, 6)
    snap = method.snapshot()
    assert snap["closed"] == [second] and snap["outstanding"][first] == [6]
    assert f"{second}:3" in snap["completed"] and f"{first}:3" in snap["completed"]
    assert method.on_validation_completed(first, 0.2, 6) == []
    assert method.on_trial_closed(first) == [Shutdown(cancel=False, failure=False)]
