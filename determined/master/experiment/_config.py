"""Experiment-config handling for the master: YAML in, ``determined.common.expconf`` (parse,
validate, fill every default), API errors out; and the searcher's reading of a config."""

from __future__ import annotations

from typing import Any

import yaml

from determined.common import expconf
from determined.errors import InvalidExperimentConfig
from determined.master._errors import InvalidArgument

# The one import of it in the master (the searcher is to export it from its package).
from determined.master.searcher._factory import max_length_units

__all__ = ["max_length_units", "parse_experiment_config", "searcher_metric"]


def parse_experiment_config(raw: str | dict[str, Any]) -> dict[str, Any]:
    """The defaulted config as a JSON-able dict.

    Raises:
        InvalidArgument: not YAML, or a config that fails validation (the message names each
            field and what is allowed).
    """
    if isinstance(raw, str):
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise InvalidArgument(f"the experiment config is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise InvalidArgument("the experiment config must be a YAML mapping of fields")
    try:
        config = dict(expconf.parse_experiment_config(raw).to_json_dict())
    except InvalidExperimentConfig as e:
        raise InvalidArgument(str(e)) from e
    _check_storage_path(config.get("checkpoint_storage") or {})
    return config


def _check_storage_path(storage: dict[str, Any]) -> None:
    """Refuse a relative ``directory`` path: it would resolve inside the trial's work dir,
    which the master deletes after every run, checkpoints and all. (``shared_fs`` requires an
    absolute ``host_path`` already.)"""
    path = str(storage.get("container_path") or "")
    if storage.get("type") == "directory" and not path.startswith("/"):
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
