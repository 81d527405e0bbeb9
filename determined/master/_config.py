"""Experiment-config handling for the master, in one place.

``determined.common.expconf`` (parse, validate, fill every default) is used when it is
importable; until then a minimal check keeps the master usable: YAML that is a mapping with an
``entrypoint`` and a ``searcher`` naming its ``name`` and ``metric``. Switching is this module.
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from determined.master._errors import InvalidArgument


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
        from determined.common import expconf
    except ImportError:
        return _minimal(raw)
    parse = getattr(expconf, "parse_experiment_config", None)
    if parse is None:
        return _minimal(raw)
    from determined.errors import InvalidExperimentConfig

    try:
        return dict(parse(raw).to_json_dict())
    except InvalidExperimentConfig as e:
        raise InvalidArgument(str(e)) from e


def _minimal(raw: dict[str, Any]) -> dict[str, Any]:
    config = dict(raw)
    if not config.get("entrypoint"):
        raise InvalidArgument("entrypoint: required (for example 'python3 train.py')")
    searcher = config.get("searcher")
    if not isinstance(searcher, dict) or not searcher.get("name") or not searcher.get("metric"):
        raise InvalidArgument("searcher: required, with a name and a metric")
    searcher = {"smaller_is_better": True, **searcher}
    config["searcher"] = searcher
    config.setdefault("hyperparameters", {})
    config.setdefault("max_restarts", 5)
    repro = dict(config.get("reproducibility") or {})
    repro.setdefault("experiment_seed", int(time.time()) & 0xFFFFFFFF)
    config["reproducibility"] = repro
    return config


def searcher_metric(config: dict[str, Any]) -> tuple[str, bool]:
    """``(searcher.metric, searcher.smaller_is_better)`` of a defaulted config."""
    searcher = config.get("searcher") or {}
    return str(searcher.get("metric") or ""), bool(searcher.get("smaller_is_better", True))
