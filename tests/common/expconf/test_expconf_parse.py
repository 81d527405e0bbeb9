"""parse_experiment_config: example configs, every default, round trips, top-level errors."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from determined.common import expconf
from determined.common.expconf import InvalidExperimentConfig, parse_experiment_config

CONFIGS = sorted((pathlib.Path(__file__).parent / "configs").glob("*.yaml"))
REPO = pathlib.Path(__file__).parents[3]
SHIPPED = sorted((REPO / "examples").rglob("*.yaml"))

MINIMAL: dict[str, Any] = {
    "entrypoint": "model_def:Trial",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def problems(raw: object) -> dict[str, str]:
    with pytest.raises(InvalidExperimentConfig) as info:
        parse_experiment_config(raw)  # type: ignore[arg-type]
    return dict(info.value.problems)


@pytest.mark.parametrize("path", CONFIGS + SHIPPED, ids=lambda p: p.name)
def test_example_configs_parse_and_round_trip(path: pathlib.Path) -> None:
    config = parse_experiment_config(path.read_text())
    data = config.to_json_dict()
    assert json.loads(json.dumps(data)) == data
    again = parse_experiment_config(data)
    assert again == config
    assert again.to_json_dict() == data


def test_example_configs_present() -> None:
    assert len(CONFIGS) >= 8


def test_every_top_level_default() -> None:
    data = parse_experiment_config(MINIMAL).to_json_dict()
    assert data["name"].startswith("Experiment (") and data["name"].endswith(")")
    expected: dict[str, Any] = {
        "description": None,
        "labels": [],
        "data": {},
        "hyperparameters": {},
        "min_validation_period": {"batches": 0},
        "min_checkpoint_period": {"batches": 0},
        "records_per_epoch": 0,
        "scheduling_unit": 100,
        "checkpoint_policy": "best",
        "max_restarts": 5,
        "perform_initial_validation": False,
        "debug": False,
        "workspace": "",
        "project": "",
        "preemption_timeout": 3600,
        "log_policies": [],
        "integrations": None,
        "bind_mounts": [],
    }
    for key, value in expected.items():
        assert data[key] == value, key
    assert data["resources"] == {
        "slots_per_trial": 1,
        "max_slots": None,
        "weight": 1.0,
        "native_parallel": False,
        "shm_size": None,
        "resource_pool": "",
        "priority": None,
        "is_single_node": None,
        "devices": [],
    }
    assert data["optimizations"] == {
        "aggregation_frequency": 1,
        "average_aggregated_gradients": True,
        "average_training_metrics": True,
        "gradient_compression": False,
        "grad_updates_size_file": None,
        "mixed_precision": "O0",
        "tensor_fusion_threshold": 64,
        "tensor_fusion_cycle_time": 1,
        "auto_tune_tensor_fusion": False,
    }
    assert data["profiling"] == {
        "enabled": False,
        "begin_on_batch": 0,
        "end_after_batch": None,
        "sync_timings": True,
    }
    assert data["searcher"] == {
        "name": "single",
        "metric": "loss",
        "smaller_is_better": True,
        "source_trial_id": None,
        "source_checkpoint_uuid": None,
        "max_length": {"batches": 10},
    }
    assert set(data["environment"]) >= {"image", "environment_variables", "ports"}
    assert data["environment"]["environment_variables"] == {"cpu": [], "cuda": [], "rocm": []}


def test_experiment_seed_filled_once_and_kept() -> None:
    config = parse_experiment_config(MINIMAL)
    seed = config.reproducibility.experiment_seed
    assert 0 <= seed < 2**32
    assert parse_experiment_config(config.to_json_dict()).reproducibility.experiment_seed == seed
    given = parse_experiment_config({**MINIMAL, "reproducibility": {"experiment_seed": 7}})
    assert given.reproducibility.experiment_seed == 7


def test_name_kept_when_given_and_petname_otherwise() -> None:
    assert parse_experiment_config({**MINIMAL, "name": "mine"}).name == "mine"
    names = {parse_experiment_config(MINIMAL).name for _ in range(5)}
    assert all(n.count("-") == 2 for n in names)


def test_yaml_text_and_bytes_are_accepted() -> None:
    text = (
        "name: t\nentrypoint: python3 train.py\nreproducibility: {experiment_seed: 1}\n"
        "searcher: {name: single, metric: m, max_length: 3}\n"
    )
    config = parse_experiment_config(text)
    assert parse_experiment_config(text.encode()) == config
    assert config.entrypoint == "python3 train.py"
    assert isinstance(config.searcher, expconf.SingleConfig)
    assert config.searcher.max_length == expconf.Length(None, 3)


def test_nulls_mean_default() -> None:
    raw = {
        **MINIMAL,
        "description": None,
        "max_restarts": None,
        "resources": None,
        "bind_mounts": None,
        "hyperparameters": None,
        "optimizations": {"aggregation_frequency": None},
    }
    config = parse_experiment_config(raw)
    assert config.max_restarts == 5
    assert config.resources.slots_per_trial == 1
    assert config.optimizations.aggregation_frequency == 1
    assert config.hyperparameters == {}


def test_entrypoint_forms() -> None:
    for entrypoint in ("model_def:MNistTrial", "python3 train.py", ["python3", "train.py"]):
        assert parse_experiment_config({**MINIMAL, "entrypoint": entrypoint}).entrypoint == (
            entrypoint
        )


def test_labels_deduplicated_in_order() -> None:
    config = parse_experiment_config({**MINIMAL, "labels": ["b", "a", "b"]})
    assert config.labels == ["b", "a"]


OPT = "optimizations"
TOP_LEVEL_ERRORS = [
    ({"bogus": 1}, "bogus", "unknown top-level key"),
    ({"entrypoint": None}, "entrypoint", "is required"),
    ({"entrypoint": ""}, "entrypoint", "must not be empty"),
    ({"entrypoint": []}, "entrypoint", "must not be empty"),
    ({"searcher": None}, "searcher", "is required"),
    ({"searcher": {"name": "single", "max_length": 1}}, "searcher.metric", "is required"),
    ({"max_restarts": -1}, "max_restarts", "greater than or equal to 0"),
    ({"max_restarts": "5"}, "max_restarts", "valid integer"),
    ({"scheduling_unit": 0}, "scheduling_unit", "greater than or equal to 1"),
    ({"checkpoint_policy": "some"}, "checkpoint_policy", "'best', 'all' or 'none'"),
    ({"labels": "x"}, "labels", "valid list"),
    ({"labels": [1]}, "labels[0]", "valid string"),
    ({"data": [1]}, "data", "valid dictionary"),
    ({"debug": "yes"}, "debug", "valid boolean"),
    ({"min_validation_period": 5}, "min_validation_period", "exactly one key"),
    ({"min_checkpoint_period": {"batches": 1, "epochs": 1}}, "min_checkpoint_period", "one key"),
    ({"min_checkpoint_period": {"batches": -1}}, "min_checkpoint_period", ">= 0"),
    ({"resources": 3}, "resources", "must be a mapping"),
    ({"bind_mounts": {"a": 1}}, "bind_mounts", "must be a list"),
    ({"reproducibility": {"experiment_seed": 2**32}}, "reproducibility.experiment_seed", "less"),
    ({"profiling": {"begin_on_batch": 5, "end_after_batch": 2}}, "profiling", "must not be less"),
    ({OPT: {"mixed_precision": "O4"}}, "optimizations.mixed_precision", "'O0'"),
    ({OPT: {"aggregation_frequency": 0}}, "optimizations.aggregation_frequency", "greater"),
    ({OPT: {"bogus": 0}}, "optimizations.bogus", "allowed keys here are"),
]


@pytest.mark.parametrize(("overrides", "path", "fragment"), TOP_LEVEL_ERRORS)
def test_top_level_errors_name_the_key(overrides: dict, path: str, fragment: str) -> None:
    found = problems({**MINIMAL, **overrides})
    assert path in found, found
    assert fragment in found[path]


def test_all_problems_reported_at_once() -> None:
    found = problems({"bogus": 1, "max_restarts": -1, "searcher": {"name": "random"}})
    assert {"bogus", "entrypoint", "max_restarts", "searcher.metric", "searcher.max_trials"} <= set(
        found
    )


def test_message_lists_each_problem_with_its_path() -> None:
    with pytest.raises(InvalidExperimentConfig) as info:
        parse_experiment_config({**MINIMAL, "searcher": {**MINIMAL["searcher"], "max_length": -1}})
    assert str(info.value) == (
        "invalid experiment config:\n  searcher.max_length: must be a positive integer or "
        "{batches|epochs|records: N} (got -1)"
    )
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("text", ["a: [", "- 1\n- 2", "42", "just a string"])
def test_not_a_mapping_or_bad_yaml(text: str) -> None:
    found = problems(text)
    assert list(found) == [""]


def test_empty_config_lists_required_keys() -> None:
    assert {"entrypoint", "searcher"} <= set(problems(""))


def test_non_json_values_rejected_with_paths() -> None:
    found = problems("entrypoint: a\ndata: {1: x, when: 2020-01-01, n: [.nan]}\n")
    assert found == {
        "data.1": "keys must be strings (got 1)",
        "data.when": "must be a JSON value (got date datetime.date(2020, 1, 1))",
        "data.n[0]": "must be a finite number (got nan)",
    }


def test_async_checkpoints_is_filled_only_when_given() -> None:
    """optimizations.async_checkpoints (issue #19, not in 0.37): absent from the filled config
    unless given (the filled config stays the reference's), kept when given, and a non-bool
    is refused with the field's name."""
    filled = parse_experiment_config(MINIMAL).to_json_dict()
    assert "async_checkpoints" not in filled["optimizations"]
    on = parse_experiment_config({**MINIMAL, "optimizations": {"async_checkpoints": True}})
    assert on.to_json_dict()["optimizations"]["async_checkpoints"] is True
    bad = problems({**MINIMAL, "optimizations": {"async_checkpoints": 1}})
    assert "valid boolean" in bad["optimizations.async_checkpoints"]
