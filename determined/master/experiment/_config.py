"""Experiment-config handling for the master: YAML in, ``determined.common.expconf`` (parse,
validate, fill every default), API errors out; and the searcher's reading of a config."""

from __future__ import annotations

from typing import Any

import yaml

from determined.common import expconf
from determined.errors import InvalidExperimentConfig
from determined.master._errors import InvalidArgument

# The one import of it in the master (the searcher is to export it from its package).

__all__ = ["parse_experiment_config", "searcher_metric"]


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
        return dict(expconf.parse_experiment_config(raw).to_json_dict())
    except InvalidExperimentConfig as e:
        raise InvalidArgument(str(e)) from e


def searcher_metric(config: dict[str, Any]) -> tuple[str, bool]:
    """``(searcher.metric, searcher.smaller_is_better)`` of a defaulted config."""
    searcher = config.get("searcher") or {}
    return str(searcher.get("metric") or ""), bool(searcher.get("smaller_is_better", True))
