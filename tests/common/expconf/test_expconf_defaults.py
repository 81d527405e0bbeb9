"""``expconf.default`` (the one place a default is written) and ``environment_dict`` (the one
reading of ``KEY=VALUE`` entries), and the readers of partial configs that fall back to them."""

from __future__ import annotations

import pytest

import determined as det
from determined.common import expconf

MINIMAL = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}


@pytest.mark.parametrize(
    "path",
    [
        "scheduling_unit",
        "debug",
        "max_restarts",
        "preemption_timeout",
        "checkpoint_policy",
        "resources.slots_per_trial",
        "resources.native_parallel",
        "optimizations.average_training_metrics",
        "optimizations.aggregation_frequency",
        "profiling.enabled",
        "profiling.begin_on_batch",
        "profiling.sync_timings",
    ],
)
def test_a_default_is_what_a_config_that_leaves_the_key_out_gets(path: str) -> None:
    value: object = expconf.parse_experiment_config(MINIMAL)
    for key in path.split("."):
        value = getattr(value, key)
    assert expconf.default(path) == value


@pytest.mark.parametrize(
    "path", ["name", "entrypoint", "searcher", "nope", "resources.nope", "debug.x"]
)
def test_a_key_without_a_default_is_a_key_error(path: str) -> None:
    with pytest.raises(KeyError, match="not an experiment config key with a default"):
        expconf.default(path)


def test_legacy_accessors_fall_back_to_the_models_defaults() -> None:
    empty = det.ExperimentConfig({"profiling": {"enabled": True}})
    assert empty.scheduling_unit() == expconf.default("scheduling_unit") == 100
    assert empty.average_training_metrics_enabled() is True
    assert empty.slots_per_trial() == 1 and empty.debug_enabled() is False
    assert empty.profiling_interval() == (0, None) and empty.profiling_sync_timings() is True
    given = det.ExperimentConfig(
        {"scheduling_unit": 7, "optimizations": {"average_training_metrics": False}}
    )
    assert (given.scheduling_unit(), given.average_training_metrics_enabled()) == (7, False)


def test_environment_entries_as_a_mapping() -> None:
    got = expconf.environment_dict(["A=1", "B=x=y", "C", "A=2", "D="])
    assert got == {"A": "2", "B": "x=y", "C": "", "D": ""}
    parsed = expconf.parse_experiment_config(
        {**MINIMAL, "environment": {"environment_variables": {"cpu": ["A=1"], "cuda": ["A=2"]}}}
    )
    variables = parsed.environment.environment_variables
    assert (variables.as_dict("cpu"), variables.as_dict("cuda")) == ({"A": "1"}, {"A": "2"})
