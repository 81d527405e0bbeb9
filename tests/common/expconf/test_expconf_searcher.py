"""The searcher section: every searcher's fields and defaults, and its errors."""

from __future__ import annotations

import pytest

from determined.common.expconf import (
    AdaptiveASHAConfig,
    AsyncHalvingConfig,
    GridConfig,
    InvalidExperimentConfig,
    Length,
    RandomConfig,
    TPEConfig,
    Unit,
    parse_experiment_config,
)

COMMON = {"smaller_is_better": True, "source_trial_id": None, "source_checkpoint_uuid": None}


def searcher_json(searcher: dict, **top: object) -> dict:
    raw = {"entrypoint": "a:B", "searcher": {"metric": "m", **searcher}, **top}
    return parse_experiment_config(raw).to_json_dict()["searcher"]


def searcher_problems(searcher: dict, **top: object) -> dict[str, str]:
    raw = {"entrypoint": "a:B", "searcher": searcher, **top}
    with pytest.raises(InvalidExperimentConfig) as info:
        parse_experiment_config(raw)
    return dict(info.value.problems)


L = {"batches": 100}


@pytest.mark.parametrize(
    ("given", "defaults"),
    [
        ({"name": "single", "max_length": L}, {}),
        ({"name": "random", "max_length": L, "max_trials": 3}, {"max_concurrent_trials": 16}),
        ({"name": "grid", "max_length": L}, {"max_concurrent_trials": 16}),
        (
            {"name": "async_halving", "max_length": L, "max_trials": 3, "num_rungs": 2},
            {"divisor": 4.0, "max_concurrent_trials": 16, "stop_once": False},
        ),
        (
            {"name": "adaptive_asha", "max_length": L, "max_trials": 3},
            {
                "bracket_rungs": [],
                "divisor": 4.0,
                "mode": "standard",
                "max_rungs": 5,
                "max_concurrent_trials": 16,
                "stop_once": False,
            },
        ),
        ({"name": "custom"}, {"unit": None}),
        (
            {"name": "tpe", "max_length": L, "max_trials": 3},
            {"max_concurrent_trials": 16, "num_rungs": 1, "divisor": 4.0, "n_startup_trials": 10},
        ),
    ],
)
def test_defaults_per_searcher(given: dict, defaults: dict) -> None:
    assert searcher_json(given) == {"metric": "m", **COMMON, **given, **defaults}


def test_max_length_optional_for_single_random_grid_0_38_style() -> None:
    assert searcher_json({"name": "single"})["max_length"] is None
    assert searcher_json({"name": "random", "max_trials": 2})["max_length"] is None


def test_time_metric_form_replaces_max_length() -> None:
    out = searcher_json(
        {"name": "adaptive_asha", "max_trials": 4, "time_metric": "batches", "max_time": 900}
    )
    assert out["time_metric"] == "batches" and out["max_time"] == 900
    assert out["max_length"] is None
    config = parse_experiment_config(
        {"entrypoint": "a", "searcher": {"name": "tpe", "metric": "m", "max_trials": 2,
                                          "time_metric": "steps", "max_time": 5}}
    )  # fmt: skip
    assert isinstance(config.searcher, TPEConfig)


def test_0_37_output_has_no_time_metric_keys() -> None:
    out = searcher_json({"name": "adaptive_asha", "max_trials": 4, "max_length": 10})
    assert "time_metric" not in out and "max_time" not in out


def test_typed_access() -> None:
    config = parse_experiment_config(
        {
            "entrypoint": "a",
            "searcher": {
                "name": "adaptive_asha",
                "metric": "acc",
                "smaller_is_better": False,
                "max_length": {"epochs": 3},
                "max_trials": 9,
                "bracket_rungs": [3, 2],
                "source_trial_id": 12,
            },
        }
    )
    s = config.searcher
    assert isinstance(s, AdaptiveASHAConfig)
    assert s.max_length == Length(Unit.EPOCHS, 3)
    assert (s.smaller_is_better, s.bracket_rungs, s.source_trial_id) == (False, [3, 2], 12)


def test_searcher_classes_by_name() -> None:
    for name, cls, extra in [
        ("random", RandomConfig, {"max_trials": 1}),
        ("grid", GridConfig, {}),
        ("async_halving", AsyncHalvingConfig, {"max_trials": 1, "num_rungs": 1}),
    ]:
        raw = {
            "entrypoint": "a",
            "searcher": {"name": name, "metric": "m", "max_length": 1, **extra},
        }
        assert type(parse_experiment_config(raw).searcher) is cls


ASHA = {"name": "adaptive_asha", "metric": "m", "max_length": 1, "max_trials": 2}
A_NOLEN = {"name": "adaptive_asha", "metric": "m", "max_trials": 2}
TPE = {"name": "tpe", "metric": "m", "max_length": 1, "max_trials": 2}
RND = {"name": "random", "metric": "m", "max_trials": 1}
ONE = {"name": "single", "metric": "m"}
HALV = {"name": "async_halving", "metric": "m", "max_length": 1, "max_trials": 2}


@pytest.mark.parametrize(
    ("searcher", "path", "fragment"),
    [
        ({"metric": "m"}, "searcher.name", "is required"),
        ({"name": "bayes", "metric": "m"}, "searcher.name", "unknown searcher 'bayes'"),
        ({"name": 3, "metric": "m"}, "searcher.name", "unknown searcher"),
        ({"name": "adaptive", "metric": "m"}, "searcher.name", "use 'adaptive_asha'"),
        ({"name": "adaptive_simple", "metric": "m"}, "searcher.name", "has been removed"),
        ({"name": "sync_halving", "metric": "m"}, "searcher.name", "use 'async_halving'"),
        ({"name": "pbt", "metric": "m"}, "searcher.name", "has been removed"),
        ({"name": "single", "max_length": 1}, "searcher.metric", "is required"),
        ({**ONE, "metric": 3}, "searcher.metric", "valid string"),
        ({"name": "single", "metric": "m", "max_length": -1}, "searcher.max_length", "positive"),
        ({**ONE, "smaller_is_better": "no"}, "searcher.smaller_is_better", "boolean"),
        ({"name": "single", "metric": "m", "max_trials": 2}, "searcher.max_trials", "unknown key"),
        ({"name": "random", "metric": "m", "max_length": 1}, "searcher.max_trials", "is required"),
        ({"name": "random", "metric": "m", "max_trials": 0}, "searcher.max_trials", "greater"),
        ({**RND, "max_concurrent_trials": -1}, "searcher.max_concurrent_trials", "greater"),
        ({"name": "grid", "metric": "m", "max_trials": 4}, "searcher.max_trials", "not a grid"),
        ({**HALV}, "searcher.num_rungs", "is required"),
        (A_NOLEN, "searcher", "max_length is required"),
        ({**A_NOLEN, "time_metric": "b"}, "searcher", "go together"),
        ({**ASHA, "divisor": 1}, "searcher.divisor", "greater than 1"),
        ({**ASHA, "mode": "x"}, "searcher.mode", "'standard'"),
        ({**ASHA, "max_rungs": 0}, "searcher.max_rungs", "greater"),
        ({**ASHA, "bracket_rungs": ["a"]}, "searcher.bracket_rungs[0]", "int"),
        ({**A_NOLEN, "max_time": 0, "time_metric": "b"}, "searcher.max_time", "greater"),
        ({"name": "custom", "metric": "m", "unit": "steps"}, "searcher.unit", "'batches'"),
        ({**TPE, "num_rungs": 0}, "searcher.num_rungs", "greater"),
        ({**TPE, "n_startup_trials": 0}, "searcher.n_startup_trials", "great"),
        ("single", "searcher", "must be a mapping"),
    ],
)  # fmt: skip
def test_errors(searcher: dict, path: str, fragment: str) -> None:
    found = searcher_problems(searcher)
    assert path in found, found
    assert fragment in found[path], found[path]


def test_grid_searcher_requires_counts() -> None:
    found = searcher_problems(
        {"name": "grid", "metric": "m", "max_length": 1},
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
    )
    assert found == {"hyperparameters.x.count": "grid search is in use but count was not provided"}


def test_custom_searcher_keeps_extra_keys() -> None:
    out = searcher_json({"name": "custom", "unit": "epochs", "anything": [1]})
    assert out["anything"] == [1] and out["unit"] == "epochs"
