"""single, random and grid: trial counts, concurrency, shutdown, config errors
(docs/reference/master.md §1.3, §1.4)."""

from __future__ import annotations

import pytest
from _kit.searcher_driver import Driver

from determined.errors import InvalidSearcherConfig, SearcherEventRejected
from determined.master.searcher import (
    Close,
    Create,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    make_search_method,
)

HP = {"x": {"type": "int", "minval": 0, "maxval": 9, "count": 3}, "y": [1, 2]}


def _creates(ops: list) -> list[Create]:
    return [op for op in ops if isinstance(op, Create)]


def test_random_issues_create_validate_close_and_respects_concurrency() -> None:
    m = make_search_method(
        {
            "name": "random",
            "metric": "m",
            "max_length": {"epochs": 3},
            "max_trials": 5,
            "max_concurrent_trials": 2,
        },
        HP,
        1,
    )
    ops = m.initial_operations()
    assert len(ops) == 6
    rid = ops[0].request_id
    assert ops[1:3] == [ValidateAfter(rid, 3), Close(rid)]
    m.on_trial_created(rid)
    assert m.on_validation_completed(rid, "any json", 3) == []  # random ignores the value
    nxt = m.on_trial_closed(rid)
    assert len(_creates(nxt)) == 1


def test_random_runs_exactly_max_trials_and_unlimited_concurrency() -> None:
    cfg = {
        "name": "random",
        "metric": "m",
        "max_length": 4,
        "max_trials": 6,
        "max_concurrent_trials": 0,
    }
    m = make_search_method(cfg, HP, 2)
    assert len(_creates(m.initial_operations())) == 6
    run = Driver(cfg, HP, 2, order_seed=5).drive()
    assert len(run.creates) == 6 and run.shutdown == Shutdown()


def test_random_replaces_invalid_hp_but_not_errors() -> None:
    cfg = {
        "name": "random",
        "metric": "m",
        "max_length": 4,
        "max_trials": 3,
        "max_concurrent_trials": 1,
    }
    m = make_search_method(cfg, HP, 3)
    (first,) = _creates(m.initial_operations())
    m.on_trial_created(first.request_id)
    assert m.on_trial_exited_early(first.request_id, ExitedReason.INVALID_HP) == []
    second = _creates(m.on_trial_closed(first.request_id))[0]
    m.on_trial_created(second.request_id)
    m.on_trial_exited_early(second.request_id, ExitedReason.ERRORED)
    third = _creates(m.on_trial_closed(second.request_id))[0]
    m.on_trial_created(third.request_id)
    m.on_validation_completed(third.request_id, 0.1, 4)
    fourth = _creates(m.on_trial_closed(third.request_id))[0]
    m.on_trial_created(fourth.request_id)
    m.on_validation_completed(fourth.request_id, 0.1, 4)
    assert m.on_trial_closed(fourth.request_id) == [Shutdown(cancel=False, failure=False)]


@pytest.mark.parametrize(
    ("reasons", "shutdown"),
    [
        ([ExitedReason.ERRORED] * 3, Shutdown(failure=True)),
        ([ExitedReason.USER_CANCELED] * 3, Shutdown(cancel=True)),
        ([ExitedReason.ERRORED, None, ExitedReason.ERRORED], Shutdown()),
    ],
)
def test_experiment_outcome_from_trial_outcomes(reasons: list, shutdown: Shutdown) -> None:
    m = make_search_method(
        {"name": "random", "metric": "m", "max_length": 4, "max_trials": 3}, HP, 4
    )
    ops = m.initial_operations()
    for create, reason in zip(_creates(ops), reasons, strict=True):
        m.on_trial_created(create.request_id)
        if reason is None:
            m.on_validation_completed(create.request_id, 1.0, 4)
        else:
            m.on_trial_exited_early(create.request_id, reason)
        last = m.on_trial_closed(create.request_id)
    assert last == [shutdown]


def test_single_is_one_trial_and_does_not_replace_invalid_hp() -> None:
    m = make_search_method({"name": "single", "metric": "m", "max_length": 8}, HP, 5)
    (create,) = _creates(m.initial_operations())
    m.on_trial_created(create.request_id)
    m.on_trial_exited_early(create.request_id, ExitedReason.INVALID_HP)
    assert m.on_trial_closed(create.request_id) == [Shutdown()]


def test_grid_runs_every_point_last_first_with_concurrency() -> None:
    cfg = {"name": "grid", "metric": "m", "max_length": 7, "max_concurrent_trials": 2}
    m = make_search_method(cfg, HP, 6)
    ops = m.initial_operations()
    creates = _creates(ops)
    assert [c.hparams for c in creates] == [
        {"x": 9, "y": [1, 2]},
        {"x": 5, "y": [1, 2]},
    ]  # 4.5 rounds to 5
    assert ops[1] == ValidateAfter(creates[0].request_id, 7)
    run = Driver(cfg, HP, 6, order_seed=1).drive()
    assert [c.hparams["x"] for c in run.creates] == [9, 5, 0]


def test_grid_rejects_max_trials_and_missing_count() -> None:
    with pytest.raises(InvalidSearcherConfig, match="max_trials is not a grid field"):
        make_search_method({"name": "grid", "metric": "m", "max_length": 1, "max_trials": 2}, HP, 0)
    with pytest.raises(InvalidSearcherConfig, match="count was not provided"):
        make_search_method(
            {"name": "grid", "metric": "m", "max_length": 1},
            {"a": {"type": "double", "minval": 0, "maxval": 1}},
            0,
        )


def test_grid_without_hyperparameters_runs_one_trial() -> None:
    run = Driver({"name": "grid", "metric": "m", "max_length": 2}, {}, 0).drive()
    assert [c.hparams for c in run.creates] == [{}]


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        ({"name": "random", "max_length": 1, "max_trials": 1}, "searcher.metric"),
        ({"name": "random", "metric": "m", "max_length": 1}, "needs 'max_trials'"),
        ({"name": "adaptive", "metric": "m"}, "removed in Determined 0.37"),
        ({"name": "bogus", "metric": "m"}, "must be one of"),
        (
            {"name": "single", "metric": "m", "max_length": {"batches": 1, "epochs": 2}},
            "exactly one of",
        ),
        (
            {
                "name": "adaptive_asha",
                "metric": "m",
                "max_length": 9,
                "max_trials": 4,
                "divisor": 1,
            },
            "greater than 1",
        ),
        (
            {"name": "adaptive_asha", "metric": "m", "max_trials": 4, "time_metric": "b"},
            "go together",
        ),
    ],
)
def test_config_errors_name_the_field(cfg: dict, needle: str) -> None:
    with pytest.raises(InvalidSearcherConfig, match=needle):
        make_search_method(cfg, HP, 0)


def test_events_are_checked() -> None:
    m = make_search_method({"name": "single", "metric": "m", "max_length": 8}, HP, 5)
    (create,) = _creates(m.initial_operations())
    rid = create.request_id
    with pytest.raises(SearcherEventRejected, match="unknown"):
        m.on_trial_closed("nope")
    m.on_trial_created(rid)
    with pytest.raises(SearcherEventRejected, match="no outstanding ValidateAfter"):
        m.on_validation_completed(rid, 0.5, 7)
    m.on_validation_completed(rid, 0.5, 8)
    with pytest.raises(SearcherEventRejected, match="already completed"):
        m.on_validation_completed(rid, 0.5, 8)
    assert m.on_trial_exited_early(rid, ExitedReason.ERRORED) == []
    assert m.on_trial_exited_early(rid, ExitedReason.ERRORED) == []  # repeats ignored
    with pytest.raises(SearcherEventRejected, match="already called"):
        m.initial_operations()


def test_progress_counts_units_trained() -> None:
    m = make_search_method(
        {"name": "random", "metric": "m", "max_length": 10, "max_trials": 2}, HP, 9
    )
    a, b = _creates(m.initial_operations())
    m.on_trial_created(a.request_id)
    m.on_trial_created(b.request_id)
    assert m.progress({a.request_id: 5}) == 0.25
    m.on_validation_completed(a.request_id, 1, 10)
    m.on_trial_closed(a.request_id)
    assert m.progress({a.request_id: 10, b.request_id: 5}) == 0.75
