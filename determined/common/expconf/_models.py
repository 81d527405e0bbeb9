"""The top-level experiment config: every key the reference's 0.37 schema knows, with its
default. Build one with :func:`parse_experiment_config`, never field by field."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_serializer, field_validator
from pydantic_core import PydanticUndefined

from determined.common.expconf._base import Section
from determined.common.expconf._hparams import HyperparameterSpace, hyperparameters_to_json
from determined.common.expconf._lengths import Length, PeriodLength
from determined.common.expconf._resources import BindMount, EnvironmentConfig, ResourcesConfig
from determined.common.expconf._searcher import SearcherConfig
from determined.common.expconf._storage import CheckpointStorageConfig
from determined.common.expconf._training import (
    OptimizationsConfig,
    ProfilingConfig,
    ReproducibilityConfig,
)


def _omit_none(value: Any) -> bool:
    return value is None


class LogAction(Section):
    """What a matching log line does: ``cancel_retries`` (a failure of the trial is final) or
    ``exclude_node`` (its next run avoids the node that logged it)."""

    type: Literal["cancel_retries", "exclude_node"]


class LogPolicy(Section):
    """One of ``log_policies``: a regex over the trial's log lines and its action."""

    pattern: str
    action: LogAction

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as e:
            raise ValueError(f"is not a valid regular expression: {e}") from e
        return value


def _zero_batches() -> Length:
    return Length.from_json({"batches": 0}, allow_int=False)


class TopLevelScalars(Section):
    """The top-level keys that are not sections of their own; validated in one go so that
    each problem carries its top-level key path."""

    name: str
    description: str | None = None
    labels: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    entrypoint: str | list[str]
    min_validation_period: PeriodLength = Field(default_factory=_zero_batches)
    min_checkpoint_period: PeriodLength = Field(default_factory=_zero_batches)
    records_per_epoch: int = Field(default=0, ge=0)
    scheduling_unit: int = Field(default=100, ge=1)
    checkpoint_policy: Literal["best", "all", "none"] = "best"
    max_restarts: int = Field(default=5, ge=0)
    perform_initial_validation: bool = False
    debug: bool = False
    workspace: str = ""
    project: str = ""
    preemption_timeout: int = Field(default=3600, ge=0)
    log_policies: list[LogPolicy] = Field(default_factory=list)
    integrations: dict[str, Any] | None = None
    # Legacy keys older configs carry; kept as given and left out of the JSON when absent.
    integration: Any = Field(default=None, exclude_if=_omit_none)
    security: Any = Field(default=None, exclude_if=_omit_none)
    tensorboard_storage: Any = Field(default=None, exclude_if=_omit_none)
    data_layer: Any = Field(default=None, exclude_if=_omit_none)
    internal: Any = Field(default=None, exclude_if=_omit_none)
    slurm: Any = Field(default=None, exclude_if=_omit_none)
    pbs: Any = Field(default=None, exclude_if=_omit_none)

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, value: str | list[str]) -> str | list[str]:
        if not value or (isinstance(value, str) and not value.strip()):
            raise ValueError(
                "must not be empty: give `module:TrialClass` or a command such as "
                "`python3 train.py` (a string or a list)"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _unique_labels(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


class ExperimentConfig(TopLevelScalars):
    """A validated experiment config with every default filled in (the master's "defaulted
    config"). Immutable; use ``model_copy(update=...)`` for a changed copy.

    ``hyperparameters`` is a space: name -> ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP,
    or name -> nested space (a plain dict).
    """

    searcher: SearcherConfig
    hyperparameters: HyperparameterSpace = Field(default_factory=dict)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    checkpoint_storage: CheckpointStorageConfig
    optimizations: OptimizationsConfig = Field(default_factory=OptimizationsConfig)
    profiling: ProfilingConfig = Field(default_factory=ProfilingConfig)
    reproducibility: ReproducibilityConfig = Field(default_factory=ReproducibilityConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    bind_mounts: list[BindMount] = Field(default_factory=list)

    @field_serializer("hyperparameters")
    def _dump_hparams(self, space: HyperparameterSpace) -> dict[str, Any]:
        return hyperparameters_to_json(space)

    def to_json_dict(self) -> dict[str, Any]:
        """The defaulted config as JSON-ready data: what the master stores, returns from
        ``GET /api/v1/experiments/{id}`` and hands to trials in ``DET_EXPERIMENT_CONFIG``.
        Parsing it again gives an equal config."""
        return self.model_dump(mode="json")


def default(path: str) -> Any:
    """The default a config that leaves out the key at ``path`` gets: ``default("scheduling_unit")``
    is 100, ``default("optimizations.average_training_metrics")`` True. The one place for
    defaults: readers of partial configs (local runs, legacy trial code) fall back to these.

    Raises:
        KeyError: no such key, or one without a default (``name``, ``searcher``...).
    """
    head, *rest = path.split(".")
    field = ExperimentConfig.model_fields.get(head)
    value = None if field is None else field.get_default(call_default_factory=True)
    if field is None or value is PydanticUndefined:
        raise KeyError(f"{head!r} is not an experiment config key with a default")
    for key in rest:
        if not isinstance(value, Section) or key not in type(value).model_fields:
            raise KeyError(f"{path!r} is not an experiment config key with a default")
        value = getattr(value, key)
    return value
