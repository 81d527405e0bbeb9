"""Properties of every search method under random event orders, early exits and restarts."""

from __future__ import annotations

import json
from collections.abc import Callable

from _kit.searcher_driver import Driver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from determined.master.searcher import (
    Create,
    ExitedReason,
    ValidateAfter,
    grid,
    parse_hyperparameters,
)

HPARAMS = {
    "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10, "count": 2},
    "units": {"type": "int", "minval": 8, "maxval": 64, "count": 3},
    "opt": {"type": "categorical", "vals": ["sgd", "adam"]},
    "block": {"dropout": {"type": "double", "minval": 0.0, "maxval": 0.5, "count": 2}},
    "global_batch_size": 32,
}

CONFIGS = [
    {"name": "single", "max_length": 50},
    {"name": "random", "max_length": 50, "max_trials": 7, "max_concurrent_trials": 3},
    {"name": "random", "max_length": 50, "max_trials": 5, "max_concurrent_trials": 0},
    {"name": "grid", "max_length": {"batches": 20}, "max_concurrent_trials": 5},
    {"name": "async_halving", "num_rungs": 3, "max_length": 90, "max_trials": 12, "divisor": 3},
    {
        "name": "async_halving",
        "num_rungs": 3,
        "max_length": 64,
        "max_trials": 10,
        "stop_once": True,
        "max_concurrent_trials": 0,
    },
    {"name": "adaptive_asha", "max_length": 1000, "max_trials": 16, "mode": "standard"},
    {
        "name": "adaptive_asha",
        "max_length": 300,
        "max_trials": 20,
        "mode": "conservative",
        "divisor": 3,
        "max_concurrent_trials": 4,
    },
    {
        "name": "adaptive_asha",
        "max_length": 300,
        "max_trials": 9,
        "mode": "aggressive",
        "stop_once": True,
        "divisor": 3,
    },
    {
        "name": "adaptive_asha",
        "time_metric": "batches",
        "max_time": 300,
        "max_trials": 9,
        "divisor": 3,
        "max_concurrent_trials": 3,
    },
    # 0.38 style without max_length: trials decide their own length (no ValidateAfter)
    {"name": "single"},
    {"name": "random", "max_trials": 6, "max_concurrent_trials": 2},
    {"name": "grid", "max_concurrent_trials": 4},
]

CASES = st.tuples(
    st.sampled_from(range(len(CONFIGS))),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**16),
    st.sampled_from([0.0, 0.02, 0.1]),
)
FAST = settings(
    max_examples=int(__import__("os").environ.get("SEARCHER_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _config(i: int) -> dict:
    return {"metric": "loss", **CONFIGS[i]}


def _max_trials(cfg: dict) -> int:
    if cfg["name"] == "single":
        return 1
    if cfg["name"] == "grid":
        return len(grid(parse_hyperparameters(HPARAMS)))
    return cfg["max_trials"]


def _max_length(cfg: dict) -> int:
    raw = cfg.get("max_time", cfg.get("max_length"))
    if raw is None:
        return 0  # no length: the search asks for none, so no trial validates at one
    return raw["batches"] if isinstance(raw, dict) else raw


@FAST
@given(CASES)
def test_invariants_hold_under_any_event_order(case: tuple) -> None:
    i, seed, order, exit_rate = case
    cfg = _config(i)
    run = Driver(cfg, HPARAMS, seed, order_seed=order, exit_rate=exit_rate).drive()

    # The driver asserts no op after Shutdown or for an ended trial; here the budget checks.
    invalid = sum(1 for r in run.exits.values() if r.is_invalid_hp)
    replaces = cfg["name"] in ("random", "async_halving", "adaptive_asha")
    budget = _max_trials(cfg) + (invalid if replaces else 0)
    assert len(run.creates) <= budget
    if not run.exits:
        assert len(run.creates) == _max_trials(cfg)
    assert all(0 < x <= _max_length(cfg) for ls in run.lengths.values() for x in ls)
    assert all(0.0 <= p <= 1.0 for p in run.progress)
    assert run.shutdown is not None
    if not run.exits:
        assert run.progress[-1] == 1.0
        assert not run.shutdown.failure and not run.shutdown.cancel


@FAST
@given(CASES, st.integers(0, 400))
def test_snapshot_restore_continues_the_same_search(case: tuple, restart_at: int) -> None:
    i, seed, order, exit_rate = case
    cfg = _config(i)
    straight = Driver(cfg, HPARAMS, seed, order_seed=order, exit_rate=exit_rate).drive()
    restarted = Driver(
        cfg, HPARAMS, seed, order_seed=order, exit_rate=exit_rate, restart_at=restart_at
    ).drive()
    assert restarted.trace == straight.trace
    assert restarted.progress == straight.progress


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(range(len(CONFIGS))), st.integers(0, 2**32 - 1))
def test_same_seed_same_search_and_different_seeds_differ(i: int, seed: int) -> None:
    cfg = _config(i)
    a = Driver(cfg, HPARAMS, seed, order_seed=1).drive()
    b = Driver(cfg, HPARAMS, seed, order_seed=1).drive()
    assert json.dumps(a.trace) == json.dumps(b.trace)
    c = Driver(cfg, HPARAMS, seed ^ 0x5A5A5A5A, order_seed=1).drive()
    assert [x.request_id for x in a.creates] != [x.request_id for x in c.creates]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**16), st.sampled_from([0.0, 0.1]))
def test_grid_covers_exactly_the_cartesian_product(seed: int, order: int, rate: float) -> None:
    cfg = {"metric": "loss", "name": "grid", "max_length": 10, "max_concurrent_trials": 2}
    run = Driver(cfg, HPARAMS, seed, order_seed=order, exit_rate=rate).drive()
    seen = sorted(json.dumps(c.hparams, sort_keys=True) for c in run.creates)
    expected = sorted(json.dumps(p, sort_keys=True) for p in grid(parse_hyperparameters(HPARAMS)))
    assert seen == expected
    assert len(expected) == 2 * 3 * 2 * 2 * 1


def _rank_checker(divisor: float, stop_once: bool) -> Callable[[Driver, object], None]:
    """on_op hook: every ValidateAfter beyond rung 0 goes to a trial whose result at the rung
    below was in the top 1/divisor of that rung when the decision was made (a trial that
    exited while training towards a rung counts there as the worst result)."""

    def check(driver: Driver, op: object) -> None:
        if not isinstance(op, ValidateAfter):
            return
        targets = driver.method.rung_lengths[0]
        r = targets.index(op.length)
        if r == 0:
            return
        below = targets[r - 1]
        values = {}
        for rid, lengths in driver.run.lengths.items():
            if below in lengths:
                values[rid] = driver.run.metrics[rid][lengths.index(below)]
            elif rid in driver.run.exits and below in driver.sent.get(rid, []):
                values[rid] = float("inf")
        mine = values[op.request_id]
        better = sum(1 for v in values.values() if v < mine)
        n = len(values)
        quota = max(int(n / divisor), 1) if stop_once else int(n / divisor)
        assert better < quota, (op, mine, sorted(values.values()))

    return check


@FAST
@given(CASES, st.booleans())
def test_asha_continues_only_the_top_of_a_rung(case: tuple, stop_once: bool) -> None:
    _, seed, order, exit_rate = case
    cfg = {
        "metric": "loss",
        "name": "async_halving",
        "num_rungs": 3,
        "max_length": 64,
        "max_trials": 16,
        "divisor": 4,
        "stop_once": stop_once,
    }
    # Promotion ASHA scores exited waiting trials at rungs they never reached; keep exits to
    # stop_once, where every entry of a rung is a result or an exit while training towards it.
    rate = exit_rate if stop_once else 0.0
    reasons = (ExitedReason.ERRORED, ExitedReason.USER_CANCELED)
    check = _rank_checker(4.0, stop_once)
    Driver(
        cfg, HPARAMS, seed, order_seed=order, exit_rate=rate, reasons=reasons, on_op=check
    ).drive()


def test_every_create_is_a_new_trial_and_rng_is_json() -> None:
    cfg = _config(6)
    run = Driver(cfg, HPARAMS, 7, order_seed=3, exit_rate=0.05).drive()
    ids = [c.request_id for c in run.creates]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(c, Create) for c in run.creates)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["random", "grid"]),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**16),
    st.sampled_from([0.0, 0.1]),
    st.sampled_from([5, None]),
)
def test_never_more_live_trials_than_max_concurrent(
    name: str, mct: int, seed: int, order: int, exit_rate: float, length: int | None
) -> None:
    """docs/reference/master.md §6 item 10: at no point are more than max_concurrent_trials trials
    alive (also when trials decide their own length)."""
    cfg = {"metric": "loss", "name": name, "max_length": length, "max_concurrent_trials": mct}
    if name == "random":
        cfg["max_trials"] = 9
    peak = [0]

    def count(driver: Driver, op: object) -> None:
        if isinstance(op, Create):
            live = len(driver.hp_of) + 1 - len(driver.ended)  # this Create is not in yet
            peak[0] = max(peak[0], live)
            assert live <= mct, (op, live)

    run = Driver(cfg, HPARAMS, seed, order_seed=order, exit_rate=exit_rate, on_op=count).drive()
    assert peak[0] == mct and len(run.creates) >= 9
