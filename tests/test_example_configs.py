"""0.37's Hugging Face Trainer and DeepSpeed example configs (tests/fixtures/example_configs,
copied unchanged) pass the validation `det experiment create` runs before it uploads anything;
tests/transformers/test_hf_trainer_cluster.py has a master accept them too."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from determined.common import expconf

EXAMPLES = pathlib.Path(__file__).parent / "fixtures" / "example_configs"
CONFIGS = sorted(EXAMPLES.rglob("*.yaml"))


def test_the_examples_are_all_here() -> None:
    names = {str(p.relative_to(EXAMPLES)) for p in CONFIGS}
    assert len(names) == 12
    assert "deepspeed/gpt_neox/zero1.yaml" in names
    assert "hf_trainer_api/hf_language_modeling/deepspeed.yaml" in names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_config_is_accepted_unchanged(path: pathlib.Path) -> None:
    raw = yaml.safe_load(path.read_text())
    config = expconf.parse_experiment_config(raw)
    assert config.searcher.metric == raw["searcher"]["metric"]
    assert config.to_json_dict()["entrypoint"] == raw["entrypoint"]
