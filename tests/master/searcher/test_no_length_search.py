"""0.38-style single, random and grid without ``searcher.max_length``: each trial decides its
own length (``Trainer.fit(max_length=...)``), so the search asks for none.

The operations each method emits, progress, snapshots (new and pre-existing) and the preview.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _kit.searcher_driver import Driver
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.errors import InvalidSearcherConfig, SearcherEventRejected
from determined.master.searcher import (
    Close,
    Create,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    make_search_method,
    preview,
    restore_search_method,
)

HP = {"x": {"type": "int", "minval": 0, "maxval": 9, "count": 3}, "y": [1, 2]}


def _creates(ops: list) -> list[Create]:
    return [op for op in ops if isinstance(op, Create)]


def _pairs(ops: list) -> list[tuple[str, str]]:
    """(kind, request id) of each op, to check the shape without the sampled values."""
    return [(type(op).__name__, op.request_id) for op in ops]


def test_single_without_max_length_is_create_and_close() -> None:
    m = make_search_method({"name": "single", "metric": "m"}, HP, 5)
    assert m.trials_decide_length
    ops = m.initial_operations()
    assert len(ops) == 2 and isinstance(ops[0], Create) and ops[1] == Close(ops[0].request_id)
    rid = ops[0].request_id
    assert m.on_trial_created(rid) == []
    # the trial ran and exited 0: the master closes it and the search is over
    assert m.on_trial_closed(rid) == [Shutdown()]
    assert m.progress({}) == 1.0


def test_an_explicit_null_max_length_is_no_length() -> None:
    m = make_search_method({"name": "single", "metric": "m", "max_length": None}, HP, 5)
    assert m.trials_decide_length and m.rung_lengths == [[]]


def test_random_without_max_length_respects_max_trials_and_concurrency() -> None:
    cfg = {"name": "random", "metric": "m", "max_trials": 3, "max_concurrent_trials": 2}
    m = make_search_method(cfg, HP, 1)
    ops = m.initial_operations()
    a, b = _creates(ops)
    assert _pairs(ops) == [
        ("Create", a.request_id),
        ("Close", a.request_id),
        ("Create", b.request_id),
        ("Close", b.request_id),
    ]
    assert not any(isinstance(op, ValidateAfter) for op in ops)
    m.on_trial_created(a.request_id)
    m.on_trial_created(b.request_id)
    nxt = m.on_trial_closed(a.request_id)
    (c,) = _creates(nxt)
    assert _pairs(nxt) == [("Create", c.request_id), ("Close", c.request_id)]
    m.on_trial_created(c.request_id)
    assert m.on_trial_closed(b.request_id) == []
    assert m.on_trial_closed(c.request_id) == [Shutdown()]


def test_random_without_max_length_replaces_invalid_hp() -> None:
    cfg = {"name": "random", "metric": "m", "max_trials": 1, "max_concurrent_trials": 1}
    m = make_search_method(cfg, HP, 3)
    (first,) = _creates(m.initial_operations())
    m.on_trial_created(first.request_id)
    m.on_trial_exited_early(first.request_id, ExitedReason.INVALID_HP)
    (second,) = _creates(m.on_trial_closed(first.request_id))
    m.on_trial_created(second.request_id)
    assert m.progress({}) == 0.0  # the invalid trial does not count as done
    assert m.on_trial_closed(second.request_id) == [Shutdown()]


def test_grid_without_max_length_runs_every_point_with_no_validate_after() -> None:
    m = make_search_method({"name": "grid", "metric": "m", "max_concurrent_trials": 2}, HP, 6)
    assert m.trials_decide_length
    ops = m.initial_operations()
    assert [c.hparams["x"] for c in _creates(ops)] == [9, 5]
    assert [type(op) for op in ops] == [Create, Close, Create, Close]
    run = Driver({"name": "grid", "metric": "m", "max_concurrent_trials": 2}, HP, 6).drive()
    assert [c.hparams["x"] for c in run.creates] == [9, 5, 0]
    assert run.lengths == {c.request_id: [] for c in run.creates}
    assert run.shutdown == Shutdown() and run.progress[-1] == 1.0


def test_no_validation_is_expected_from_a_trial_that_decides_its_length() -> None:
    m = make_search_method({"name": "single", "metric": "m"}, HP, 5)
    (create,) = _creates(m.initial_operations())
    m.on_trial_created(create.request_id)
    with pytest.raises(SearcherEventRejected, match="no outstanding ValidateAfter"):
        m.on_validation_completed(create.request_id, 0.5, 10)


@pytest.mark.parametrize(
    "cfg",
    [
        {"name": "single", "metric": "m", "max_length": 8},
        {"name": "random", "metric": "m", "max_length": {"batches": 8}, "max_trials": 2},
        {"name": "grid", "metric": "m", "max_length": 8},
    ],
)
def test_with_max_length_nothing_changes(cfg: dict[str, Any]) -> None:
    m = make_search_method(cfg, HP, 2)
    assert not m.trials_decide_length
    ops = m.initial_operations()
    rid = ops[0].request_id
    assert ops[1:3] == [ValidateAfter(rid, 8), Close(rid)]
    assert m.rung_lengths == [[8]]


@pytest.mark.parametrize(
    "cfg",
    [
        {"name": "async_halving", "metric": "m", "num_rungs": 2, "max_trials": 4},
        {"name": "adaptive_asha", "metric": "m", "max_trials": 4},
        {"name": "tpe", "metric": "m", "max_trials": 4},
    ],
)
def test_rung_based_searches_still_need_a_length(cfg: dict[str, Any]) -> None:
    with pytest.raises(InvalidSearcherConfig, match="needs 'max_length'"):
        make_search_method(cfg, HP, 0)
    with pytest.raises(InvalidSearcherConfig, match="go together"):
        make_search_method({**cfg, "max_time": 10}, HP, 0)


@pytest.mark.parametrize("name", ["single", "random", "grid"])
def test_half_a_time_metric_pair_is_still_rejected(name: str) -> None:
    cfg = {"name": name, "metric": "m", "time_metric": "batches"}
    if name == "random":
        cfg["max_trials"] = 2
    with pytest.raises(InvalidSearcherConfig, match="go together"):
        make_search_method(cfg, HP, 0)


# ------------------------------------------------------------------------------ progress


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["random", "grid"]),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
    st.lists(st.floats(0, 2), max_size=6),
)
def test_progress_counts_each_trial_as_one(
    name: str, closes: int, seed: int, fractions: list[float]
) -> None:
    """Each trial counts 1 of the total: a closed one fully, a running one by the raw
    fraction it reported (capped at 1); nothing divides by a missing length."""
    cfg: dict[str, Any] = {"name": name, "metric": "m", "max_concurrent_trials": 0}
    if name == "random":
        cfg["max_trials"] = 6
    m = make_search_method(cfg, HP, seed)
    creates = _creates(m.initial_operations())
    total = len(creates)  # 6 random trials or 3 grid points, all at once
    assert total == (6 if name == "random" else 3)
    closes = min(closes, total)
    for c in creates:
        m.on_trial_created(c.request_id)
    running = {c.request_id: f for c, f in zip(creates, fractions, strict=False)}
    assert m.progress(running) == pytest.approx(sum(min(f, 1.0) for f in running.values()) / total)
    for c in creates[:closes]:
        m.on_trial_closed(c.request_id)
    still = [min(f, 1.0) for c, f in zip(creates, fractions, strict=False)][closes:]
    assert m.progress(running) == pytest.approx((closes + sum(still)) / total)


def test_progress_of_single() -> None:
    m = make_search_method({"name": "single", "metric": "m"}, HP, 0)
    (create,) = _creates(m.initial_operations())
    assert m.progress({}) == 0.0
    m.on_trial_created(create.request_id)
    assert m.progress({create.request_id: 0.25}) == 0.25
    m.on_trial_closed(create.request_id)
    assert m.progress({create.request_id: 0.25}) == 1.0


# ------------------------------------------------------------------------------ snapshots


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(
        [
            {"name": "single", "metric": "m"},
            {"name": "random", "metric": "m", "max_trials": 5, "max_concurrent_trials": 2},
            {"name": "grid", "metric": "m", "max_concurrent_trials": 2},
        ]
    ),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**16),
    st.integers(0, 30),
    st.sampled_from([0.0, 0.1]),
)
def test_snapshot_round_trip_continues_the_same_search(
    cfg: dict[str, Any], seed: int, order: int, restart_at: int, exit_rate: float
) -> None:
    straight = Driver(cfg, HP, seed, order_seed=order, exit_rate=exit_rate).drive()
    restarted = Driver(
        cfg, HP, seed, order_seed=order, exit_rate=exit_rate, restart_at=restart_at
    ).drive()
    assert restarted.trace == straight.trace
    assert restarted.progress == straight.progress
    assert not any(t["type"] == "validate_after" for t in straight.trace)


def test_snapshot_keeps_its_format() -> None:
    """Snapshots carry no length (it comes from the config), so the format is unchanged and
    snapshots written before 0.38-style searches existed still restore."""
    m = make_search_method(
        {"name": "random", "metric": "m", "max_length": 4, "max_trials": 3}, HP, 5
    )
    (create, *_) = _creates(m.initial_operations())
    m.on_trial_created(create.request_id)
    snap = json.loads(json.dumps(m.snapshot()))
    assert set(snap) == {
        "version",
        "kind",
        "experiment_seed",
        "rand",
        "started",
        "shutdown",
        "requested",
        "created",
        "closed",
        "exits",
        "outstanding",
        "completed",
        "core",
        "sampler",
    }
    assert snap["version"] == 1 and snap["core"] == {"created_trials": 3}
    cfg = {"name": "random", "metric": "m", "max_length": 4, "max_trials": 3}
    again = restore_search_method(cfg, HP, snap)
    assert again.snapshot() == snap
    grid = make_search_method({"name": "grid", "metric": "m", "max_concurrent_trials": 1}, HP, 5)
    grid.initial_operations()
    assert grid.snapshot()["core"] == {"remaining": [{"x": 0, "y": [1, 2]}, {"x": 5, "y": [1, 2]}]}


# ------------------------------------------------------------------------------ preview


@pytest.mark.parametrize(
    ("cfg", "trials"),
    [
        ({"name": "single", "metric": "m"}, 1),
        ({"name": "random", "metric": "m", "max_trials": 4, "max_concurrent_trials": 2}, 4),
        ({"name": "grid", "metric": "m"}, 3),
    ],
)
def test_preview_says_trials_decide_their_length(cfg: dict[str, Any], trials: int) -> None:
    p = preview(cfg, HP, 0)
    assert p.total_trials == trials
    assert p.rung_lengths == [[]]
    assert [(t.bracket, t.lengths, t.occurrences) for t in p.trials] == [(0, (), trials)]
    data = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert data["brackets"] == [{"bracket": 0, "rung_lengths": []}]
    assert data["trials"] == [{"bracket": 0, "lengths": [], "occurrences": trials}]
    assert data["total_trials"] == trials
    text = p.render()
    assert text.splitlines() == [
        f"This search will create a total of {trials} trial(s).",
        f"{trials} trial(s); each trains to the length it decides itself "
        "(no searcher.max_length; e.g. Trainer.fit(max_length=...))",
    ]
