"""Experiment-config handling for the master: YAML in, ``determined.common.expconf`` (parse,
validate, fill every default), API errors out; and the searcher's reading of a config."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from determined.common import expconf
from determined.errors import InvalidExperimentConfig
from determined.master._errors import InvalidArgument

__all__ = [
    "UNMANAGED_ENTRYPOINT",
    "check_size",
    "load_yaml",
    "merge_configs",
    "parse_config",
    "parse_unmanaged_config",
    "searcher_metric",
]

# What an unmanaged experiment's config shows as its entrypoint: the master never runs it.
UNMANAGED_ENTRYPOINT = "(unmanaged: runs in its user's own process)"


def parse_config(raw: str | Mapping[str, Any]) -> expconf.ExperimentConfig:
    """The typed, defaulted config, checked for what this master cannot run.

    Raises:
        InvalidArgument: not YAML, or a config that fails validation (the message names each
            field and what is allowed).
    """
    raw = load_yaml(raw, "the experiment config") if isinstance(raw, str) else raw
    check_size(raw, "the experiment config")
    if not isinstance(raw, Mapping):
        raise InvalidArgument("the experiment config must be a YAML mapping of fields")
    try:
        config = expconf.parse_experiment_config(raw)
    except InvalidExperimentConfig as e:
        raise InvalidArgument(str(e)) from e
    _check_storage_path(config.checkpoint_storage)
    size = len(json.dumps(config.to_json_dict()))
    if size > MAX_CONFIG_JSON_BYTES:
        raise InvalidArgument(
            f"the experiment config is {size} bytes as JSON; trials receive it in an environment "
            f"variable (DET_EXPERIMENT_CONFIG), which holds at most {MAX_CONFIG_JSON_BYTES}. "
            "Move large values (data, long lists) into files of the model definition"
        )
    return config


def merge_configs(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base``: mappings merge key by key, anything else (lists
    included) replaces, as 0.37 merges a template under a config and a continue's overrides."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_configs(out[key], value)
        else:
            out[key] = value
    return out


def parse_unmanaged_config(text: str) -> expconf.ExperimentConfig:
    """The defaulted config of an unmanaged experiment (core_v2). 0.37's client writes every
    field it knows, null where unset (``data: null``, ``labels: null``...), and no entrypoint:
    nulls mean "not given", and the entrypoint is a placeholder.

    Raises:
        InvalidArgument: as :func:`parse_config`.
    """
    raw = load_yaml(text, "the experiment config")
    if not isinstance(raw, dict):
        raise InvalidArgument("the experiment config must be a YAML mapping of fields")
    given = {k: v for k, v in raw.items() if v is not None}
    given.setdefault("entrypoint", UNMANAGED_ENTRYPOINT)
    return parse_config(given)


# Bounds on a config (issue #16): YAML aliases can make a few hundred bytes into millions of
# nodes once expanded, and deep nesting overflows the recursive parts of any parser. Linux caps
# one environment string at 128 KiB (MAX_ARG_STRLEN); the rest of that is for the name.
MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_CONFIG_JSON_BYTES = 120_000


def load_yaml(text: str, what: str) -> Any:
    """``yaml.safe_load`` within :data:`MAX_DEPTH` and :data:`MAX_NODES`.

    Raises:
        InvalidArgument: not YAML, or past a bound (the message says which).
    """
    depth = 0
    try:
        # The event parser is iterative: it sees the nesting before the recursive composer.
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InvalidArgument(f"{what} nests deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidArgument(f"{what} is not valid YAML: {e}") from e
    check_size(data, what)
    return data


def check_size(data: Any, what: str) -> None:
    """Count ``data``'s nodes as a consumer expands them (a shared alias counts each time it
    appears), without recursion, up to the bounds.

    Raises:
        InvalidArgument: more than :data:`MAX_NODES` nodes or :data:`MAX_DEPTH` levels.
    """
    stack = [(data, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise InvalidArgument(
                f"{what} expands to more than {MAX_NODES} values (YAML aliases count each "
                "time they are used)"
            )
        if depth > MAX_DEPTH:
            raise InvalidArgument(f"{what} nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _check_storage_path(storage: expconf.CheckpointStorageConfig) -> None:
    """Refuse a relative ``directory`` path: it would resolve inside the trial's work dir,
    which the master deletes after every run, checkpoints and all. (``shared_fs`` requires an
    absolute ``host_path`` already.)"""
    if not isinstance(storage, expconf.DirectoryConfig):
        return
    path = storage.container_path or ""
    if not path.startswith("/"):
        raise InvalidArgument(
            f"checkpoint_storage.container_path {path!r} is relative: trials run in a work "
            "directory the master deletes after each run, and checkpoints there would be lost. "
            "Use an absolute path, or leave checkpoint_storage out for the master's default "
            "under its data directory"
        )


def searcher_metric(config: dict[str, Any]) -> tuple[str, bool]:
    """``(searcher.metric, searcher.smaller_is_better)`` of a defaulted config."""
    searcher = config.get("searcher") or {}
    return str(searcher.get("metric") or ""), bool(searcher.get("smaller_is_better", True))
