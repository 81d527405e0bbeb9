"""determined/master/api/_resolve.py without a master: one YAML text, the parent's secrets, a
template and a workspace's defaults resolved into one typed config (the HTTP path, byte for
byte, is pinned by test_config_pins.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from determined.common import expconf
from determined.master._errors import InvalidArgument, NotFound
from determined.master.api import _redact
from determined.master.api._resolve import resolve

TEXT = """\
name: r
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 4}
reproducibility: {experiment_seed: 3}
"""
SECRET = """\
name: r
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 4}
checkpoint_storage: {type: s3, bucket: b, secret_key: HUSH}
environment: {environment_variables: [TOKEN=T0KEN, PLAIN=p]}
"""


def _no_workspace(config: dict[str, Any]) -> dict[str, Any]:
    return {}


def test_a_plain_config_keeps_its_text_and_is_parsed_once_typed() -> None:
    got = resolve(TEXT, None, None, _no_workspace)
    assert isinstance(got.config, expconf.ExperimentConfig)
    assert got.original == TEXT and not got.restored
    assert got.config == expconf.parse_experiment_config(TEXT)


def test_the_parents_secrets_fill_a_redacted_fork() -> None:
    parent = expconf.parse_experiment_config(SECRET).to_json_dict()
    redacted = yaml.safe_dump(_redact.redact(parent), sort_keys=False)
    assert "HUSH" not in redacted and "T0KEN" not in redacted
    got = resolve(redacted, parent, None, _no_workspace)
    assert got.restored
    assert got.config.to_json_dict() == parent
    assert "HUSH" in got.original  # the original text is the restored config
    with pytest.raises(InvalidArgument, match="placeholder"):
        resolve(redacted, None, None, _no_workspace)


def test_resources_slots_is_refused_from_the_user_but_kept_from_a_template() -> None:
    """0.37: ``resources.slots`` (for commands) in the config a user sends is an error; checked
    before the template is merged, so a template that carries one still works."""
    with pytest.raises(InvalidArgument, match='additionalProperties "slots" not allowed'):
        resolve(TEXT + "resources: {slots: 2}\n", None, None, _no_workspace)
    got = resolve(TEXT, None, {"resources": {"slots": 0}}, _no_workspace)
    assert got.config.resources.slots == 0
    assert got.config.to_json_dict()["resources"]["slots"] == 0
    plain = resolve(TEXT, None, None, _no_workspace).config.to_json_dict()
    assert "slots" not in plain["resources"]


def test_a_template_lies_under_the_config() -> None:
    template = {"description": "t", "hyperparameters": {"lr": 0.1, "w": 8}}
    text = TEXT + "hyperparameters: {lr: 0.5}\n"
    got = resolve(text, None, template, None)
    assert got.config.description == "t"
    assert expconf.hyperparameters_to_json(got.config.hyperparameters) == {
        "lr": {"type": "const", "val": 0.5},
        "w": {"type": "const", "val": 8},
    }
    assert yaml.safe_load(got.original)["description"] == "t" and not got.restored


@pytest.mark.parametrize(
    ("own", "storage"),
    [
        ("", {"type": "s3", "bucket": "team", "prefix": "p"}),
        ("checkpoint_storage: {save_trial_latest: 3}\n", {"type": "s3", "bucket": "team"}),
        ("checkpoint_storage: {type: s3, bucket: mine}\n", {"type": "s3", "bucket": "mine"}),
        (
            "checkpoint_storage: {type: directory, container_path: /ckpt}\n",
            {"type": "directory", "container_path": "/ckpt"},
        ),
    ],
)
def test_a_workspaces_defaults_go_under_the_config(own: str, storage: dict[str, Any]) -> None:
    seen: list[dict[str, Any]] = []

    def workspace(config: dict[str, Any]) -> dict[str, Any]:
        seen.append(config)
        return {
            "checkpoint_storage_config": {"type": "s3", "bucket": "team", "prefix": "p"},
            "default_compute_pool": "pool-a",
        }

    got = resolve(TEXT + own + "workspace: w\nproject: p\n", None, None, workspace)
    section = got.config.checkpoint_storage.to_json_dict()
    assert {k: section[k] for k in storage} == storage
    assert got.config.resources.resource_pool == "pool-a"
    assert seen[0]["workspace"] == "w"  # the callable sees the config's own names
    assert "pool-a" not in got.original  # defaults are not the user's text
    own_pool = resolve(TEXT + "resources: {resource_pool: mine}\n", None, None, workspace)
    assert own_pool.config.resources.resource_pool == "mine"


def test_a_bad_config_is_reported_before_a_bad_project() -> None:
    def unknown(config: dict[str, Any]) -> dict[str, Any]:
        raise NotFound("no project 'p' in workspace 'w'")

    with pytest.raises(InvalidArgument, match="max_restarts"):
        resolve(TEXT + "max_restarts: -1\nworkspace: w\nproject: p\n", None, None, unknown)
    with pytest.raises(NotFound):
        resolve(TEXT + "workspace: w\nproject: p\n", None, None, unknown)


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just text", "a: [1, 2"])
def test_a_config_that_is_not_a_mapping_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgument, match="mapping|not valid YAML"):
        resolve(text, None, None, _no_workspace)
