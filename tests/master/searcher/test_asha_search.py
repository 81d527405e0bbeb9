"""ASHA and adaptive_asha against the reference's numbers
(docs/reference/master.md §1.5–§1.7, §6 items 16-24)."""

from __future__ import annotations

import pytest
from _kit.searcher_driver import Driver

from determined.errors import InvalidSearcherMetric
from determined.master.searcher import (
    Bracket,
    Close,
    Create,
    ExitedReason,
    ValidateAfter,
    make_search_method,
    plan_brackets,
)
from determined.master.searcher._rungs import rung_targets

HP = {"x": {"type": "double", "minval": 0, "maxval": 1}}


def _asha(**over: object):  # noqa: ANN202
    cfg = {
        "name": "async_halving",
        "metric": "loss",
        "num_rungs": 3,
        "max_length": 9000,
        "max_trials": 16,
        "divisor": 4,
        **over,
    }
    return make_search_method(cfg, HP, 0)


def _start(m, n: int | None = None) -> list[str]:  # noqa: ANN001
    ids = [op.request_id for op in m.initial_operations() if isinstance(op, Create)]
    for rid in ids:
        m.on_trial_created(rid)
    return ids[:n] if n else ids


@pytest.mark.parametrize(
    ("length", "divisor", "rungs", "targets"),
    [
        (9000, 3, 3, [1000, 3000, 9000]),
        (12, 3, 3, [1, 4, 12]),
        (1000, 4, 3, [62, 250, 1000]),
        (2, 4, 3, [1, 1, 2]),
    ],
)
def test_rung_targets(length: int, divisor: float, rungs: int, targets: list[int]) -> None:
    assert rung_targets(length, divisor, rungs) == targets


def test_initial_trials_and_first_rung_op() -> None:
    m = _asha(max_concurrent_trials=0)  # d^(R-1) = 16
    ops = m.initial_operations()
    assert len([o for o in ops if isinstance(o, Create)]) == 16
    assert ops[1] == ValidateAfter(ops[0].request_id, 562)  # 9000 / 16
    assert not any(isinstance(o, Close) for o in ops)
    assert (
        len(
            [
                o
                for o in _asha(max_concurrent_trials=5).initial_operations()
                if isinstance(o, Create)
            ]
        )
        == 5
    )


def test_fourth_result_promotes_the_best_of_four() -> None:
    m = _asha(max_concurrent_trials=4)
    a, b, c, d = _start(m)
    for rid, metric in ((a, 0.5), (b, 0.1), (c, 0.9)):
        ops = m.on_validation_completed(rid, metric, 562)
        assert [type(o) for o in ops] == [Create, ValidateAfter]  # no promotion yet
    ops = m.on_validation_completed(d, 0.7, 562)
    assert ops == [ValidateAfter(b, 2250)]  # b resumes; the trial just reported waits


def test_new_best_after_quota_is_promoted_immediately() -> None:
    m = _asha(max_concurrent_trials=4, divisor=2, num_rungs=2, max_length=8)
    a, b, *_ = _start(m)
    m.on_validation_completed(a, 0.5, 4)  # n=1: quota 0
    ops = m.on_validation_completed(b, 0.1, 4)  # n=2: quota 1, b is best
    assert ops[0] == ValidateAfter(b, 8)


def test_larger_is_better_promotes_the_largest() -> None:
    m = _asha(max_concurrent_trials=4, smaller_is_better=False)
    a, b, c, d = _start(m)
    for rid, metric in ((a, 0.5), (b, 0.1), (c, 0.9)):
        m.on_validation_completed(rid, metric, 562)
    assert m.on_validation_completed(d, 0.7, 562) == [ValidateAfter(c, 2250)]


def test_stop_once_continues_only_the_top_fraction() -> None:
    m = _asha(max_concurrent_trials=8, stop_once=True)
    ids = _start(m)
    # n+1 = 1..3: keep = max(floor((n+1)/4), 1) = 1, so only a new best continues.
    assert m.on_validation_completed(ids[0], 0.5, 562)[0] == ValidateAfter(ids[0], 2250)
    ops = m.on_validation_completed(ids[1], 0.6, 562)
    assert ops[0] == Close(ids[1]) and isinstance(ops[1], Create)
    # A tie is inserted before the equal result, so it ranks first and continues.
    assert m.on_validation_completed(ids[2], 0.5, 562)[0] == ValidateAfter(ids[2], 2250)
    assert m.on_validation_completed(ids[3], 0.55, 562)[0] == Close(ids[3])


def test_non_numeric_metric_is_rejected_for_asha() -> None:
    m = _asha(max_concurrent_trials=1)
    (rid,) = _start(m)
    with pytest.raises(InvalidSearcherMetric, match="must be a number"):
        m.on_validation_completed(rid, "0.5", 562)
    with pytest.raises(InvalidSearcherMetric):
        m.on_validation_completed(rid, True, 562)
    assert m.on_validation_completed(rid, 0.5, 562)  # nothing was changed by the rejects


def test_never_more_than_max_trials_and_full_search_closes_out() -> None:
    cfg = {
        "name": "async_halving",
        "metric": "loss",
        "num_rungs": 3,
        "max_length": 64,
        "max_trials": 16,
        "divisor": 4,
    }
    run = Driver(cfg, HP, 3, order_seed=9).drive()
    assert len(run.creates) == 16
    reached = [len(ls) for ls in run.lengths.values()]
    # Asynchronous: a new best is promoted at once, so at least 16/4 reach rung 1 and 4/4 the top.
    assert reached.count(1) + reached.count(2) + reached.count(3) == 16
    assert reached.count(2) + reached.count(3) >= 4 and reached.count(3) >= 1
    assert run.shutdown is not None and run.progress[-1] == 1.0


def test_exit_of_a_waiting_trial_adds_no_second_metric() -> None:
    # Pins the fix of a reference quirk: killing a trial that waits at a rung recorded a second
    # (worst) result for it there, so rung 0 could hold max_trials + 1 results and never close.
    m = _asha(max_concurrent_trials=4, max_trials=4, num_rungs=2, max_length=16)
    a, b, c, d = _start(m)
    m.on_validation_completed(a, 0.3, 4)
    m.on_trial_exited_early(a, ExitedReason.USER_CANCELED)
    m.on_trial_closed(a)
    m.on_validation_completed(b, 0.2, 4)
    m.on_validation_completed(c, 0.4, 4)
    ops = m.on_validation_completed(d, 0.5, 4)
    assert ValidateAfter(b, 16) in ops
    assert {o.request_id for o in ops if isinstance(o, Close)} == {c, d}  # close-out happened


def test_adaptive_worked_example() -> None:
    brackets = plan_brackets(
        max_length=1000,
        max_trials=16,
        divisor=4,
        max_rungs=5,
        mode="standard",
        max_concurrent_trials=16,
    )
    assert brackets == [Bracket(3, 12, 8), Bracket(2, 4, 8)]
    m = make_search_method(
        {
            "name": "adaptive_asha",
            "metric": "loss",
            "max_length": {"batches": 1000},
            "max_trials": 16,
        },
        HP,
        0,
    )
    assert m.rung_lengths == [[62, 250, 1000], [250, 1000]]
    ops = m.initial_operations()
    creates = [o for o in ops if isinstance(o, Create)]
    assert len(creates) == 12
    firsts = [o.length for o in ops if isinstance(o, ValidateAfter)]
    assert firsts == [62] * 8 + [250] * 4


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("aggressive", [5]), ("standard", [5, 4, 3]), ("conservative", [5, 4, 3, 2, 1])],
)
def test_modes(mode: str, expected: list[int]) -> None:
    # maxR = min(5, floor(ln 10000 / ln 3) + 1 = 9, floor(ln 500 / ln 3) + 1 = 6) = 5
    brackets = plan_brackets(max_length=10000, max_trials=500, divisor=3, max_rungs=5, mode=mode)
    assert [b.num_rungs for b in brackets] == expected
    assert sum(b.max_trials for b in brackets) == 500


def test_bracket_concurrency_split() -> None:
    b = plan_brackets(
        max_length=1000,
        max_trials=100,
        divisor=4,
        max_rungs=5,
        mode="conservative",
        max_concurrent_trials=7,
    )
    assert [x.max_concurrent_trials for x in b] == [2, 2, 2, 1]  # 7 over 4 brackets
    b = plan_brackets(
        max_length=1000,
        max_trials=100,
        divisor=4,
        max_rungs=5,
        mode="conservative",
        max_concurrent_trials=0,
    )
    assert {x.max_concurrent_trials for x in b} == {max(b[-1].max_trials, 4)}


def test_time_metric_judges_every_validation_and_stops_by_close() -> None:
    m = make_search_method(
        {
            "name": "async_halving",
            "metric": "loss",
            "num_rungs": 2,
            "time_metric": "batches",
            "max_time": 100,
            "max_trials": 2,
            "divisor": 2,
            "max_concurrent_trials": 2,
        },
        HP,
        1,
    )
    assert m.every_validation
    ops = m.initial_operations()
    assert ops[1] == ValidateAfter(ops[0].request_id, 100)
    a, b = _start_created(m, ops)
    assert m.on_validation_completed(a, 0.5, 10) == []  # below rung 0 (50)
    assert m.on_validation_completed(a, 0.5, 60) == []  # best so far at rung 0: continues
    assert m.on_validation_completed(b, 0.9, 120) == [Close(b)]  # passes rung 0 only as worst
    assert m.on_validation_completed(a, 0.2, 100) == [Close(a)]  # top rung: done


def _start_created(m, ops) -> list[str]:  # noqa: ANN001
    ids = [o.request_id for o in ops if isinstance(o, Create)]
    for rid in ids:
        m.on_trial_created(rid)
    return ids
