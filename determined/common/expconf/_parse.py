"""``parse_experiment_config``: YAML or dict in, a defaulted ExperimentConfig out, or one
InvalidExperimentConfig listing every problem with its key path."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import yaml

from determined.common.expconf._base import Problems, Section, join_path, validate
from determined.common.expconf._hparams import parse_hyperparameters
from determined.common.expconf._models import ExperimentConfig, TopLevelScalars
from determined.common.expconf._petname import experiment_name
from determined.common.expconf._resources import (
    BindMount,
    EnvironmentConfig,
    ResourcesConfig,
)
from determined.common.expconf._searcher import parse_searcher
from determined.common.expconf._storage import default_storage, merge_storage, parse_storage
from determined.common.expconf._training import (
    OptimizationsConfig,
    ProfilingConfig,
    ReproducibilityConfig,
)
from determined.errors import InvalidExperimentConfig

_SECTIONS: dict[str, type[Section]] = {
    "resources": ResourcesConfig,
    "environment": EnvironmentConfig,
    "optimizations": OptimizationsConfig,
    "profiling": ProfilingConfig,
    "reproducibility": ReproducibilityConfig,
}
_OWN = {"searcher", "hyperparameters", "checkpoint_storage", "bind_mounts", *_SECTIONS}
KNOWN_KEYS = frozenset(_OWN | set(TopLevelScalars.model_fields))


def _load(raw: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    if isinstance(raw, (str, bytes)):
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise InvalidExperimentConfig([("", f"not valid YAML: {e}")]) from e
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise InvalidExperimentConfig(
            [("", f"must be a mapping of config keys (got {type(raw).__name__})")]
        )
    return dict(raw)


def _json_problems(value: Any, path: str, problems: Problems) -> None:
    """Configs travel as JSON: string keys, finite numbers, no YAML-only types (dates...)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(
                    (join_path(path, [str(key)]), f"keys must be strings (got {key!r})")
                )
            else:
                _json_problems(item, join_path(path, [key]), problems)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _json_problems(item, join_path(path, [i]), problems)
    elif isinstance(value, float) and not math.isfinite(value):
        problems.append((path, f"must be a finite number (got {value!r})"))
    elif value is not None and not isinstance(value, (str, int, float)):
        problems.append((path, f"must be a JSON value (got {type(value).__name__} {value!r})"))


def _unknown_keys(raw: Mapping[Any, Any], problems: Problems) -> None:
    for key in raw:
        if key not in KNOWN_KEYS:
            problems.append(
                (
                    str(key),
                    "unknown top-level key; allowed keys are: " + ", ".join(sorted(KNOWN_KEYS)),
                )
            )


def _bind_mounts(raw: Any, problems: Problems) -> list[BindMount]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(("bind_mounts", f"must be a list of mounts (got {raw!r})"))
        return []
    mounts = [
        validate(BindMount, item, f"bind_mounts[{i}]", problems) for i, item in enumerate(raw)
    ]
    return [m for m in mounts if m is not None]


def _scalars(raw: Mapping[str, Any], problems: Problems) -> TopLevelScalars | None:
    values = {k: v for k, v in raw.items() if k in TopLevelScalars.model_fields}
    if values.get("name") is None:
        values["name"] = experiment_name()
    if values.get("entrypoint") is None:
        problems.append(
            ("entrypoint", "is required: `module:TrialClass` or a command such as "
             "`python3 train.py` (a string or a list)")
        )  # fmt: skip
        values["entrypoint"] = "-"  # placeholder so the other keys are still checked
    return validate(TopLevelScalars, values, "", problems)


def parse_experiment_config(
    raw: Mapping[str, Any] | str | bytes,
    *,
    default_checkpoint_storage: Mapping[str, Any] | None = None,
) -> ExperimentConfig:
    """Validate an experiment config and fill every default (the reference's "defaulted
    config").

    Called by the master on experiment creation (``POST /api/v1/experiments``), by the CLI
    before it uploads, and by the harness on ``DET_EXPERIMENT_CONFIG`` (already defaulted:
    parsing it again changes nothing). Pure apart from two runtime defaults, as in the
    reference: a missing ``name`` gets a fresh petname and a missing
    ``reproducibility.experiment_seed`` the current Unix time.

    Args:
        raw: YAML text or the already-loaded mapping.
        default_checkpoint_storage: the master's (or workspace's) ``checkpoint_storage``, merged
            under the user's section; None means shared_fs at ``$DET_HOME/checkpoints``.

    Raises:
        InvalidExperimentConfig: listing every problem as ``key.path: what to fix``.
    """
    config = _load(raw)
    problems: Problems = []
    _json_problems(config, "", problems)
    if problems:
        raise InvalidExperimentConfig(problems)
    _unknown_keys(config, problems)
    scalars = _scalars(config, problems)
    searcher = parse_searcher(config.get("searcher"), problems)
    grid = isinstance(config.get("searcher"), Mapping) and config["searcher"].get("name") == "grid"
    space = parse_hyperparameters(config.get("hyperparameters"), problems, grid=grid)
    default = default_checkpoint_storage or default_storage()
    storage = parse_storage(merge_storage(config.get("checkpoint_storage"), default), problems)
    sections = {
        key: validate(model, config.get(key), key, problems) for key, model in _SECTIONS.items()
    }
    mounts = _bind_mounts(config.get("bind_mounts"), problems)
    if problems or scalars is None:
        raise InvalidExperimentConfig(problems)
    return ExperimentConfig.model_validate(
        {
            **dict(scalars),
            "searcher": searcher,
            "hyperparameters": space,
            "checkpoint_storage": storage,
            "bind_mounts": mounts,
            **sections,
        }
    )
