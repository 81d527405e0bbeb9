"""The ``searcher`` section: one model per searcher ``name``.

Lengths are in the unit of ``max_length`` (absolute, never converted). 0.38-style ASHA configs
name a reported metric (``time_metric``) and its bound (``max_time``) instead of ``max_length``.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import ConfigDict, Field, model_validator

from determined.common.expconf._base import Problems, Section, validate
from determined.common.expconf._lengths import SearcherLength


def _omit_none(value: Any) -> bool:
    return value is None


class _SearcherBase(Section):
    metric: str
    smaller_is_better: bool = True
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None


class _TimeMetric(_SearcherBase):
    """Either ``max_length`` or the 0.38 pair ``time_metric`` + ``max_time``."""

    max_length: SearcherLength | None = None
    time_metric: str | None = Field(default=None, exclude_if=_omit_none)
    max_time: int | None = Field(default=None, ge=1, exclude_if=_omit_none)

    @model_validator(mode="after")
    def _length_or_time(self) -> _TimeMetric:
        if (self.time_metric is None) != (self.max_time is None):
            raise ValueError(
                "time_metric and max_time go together (0.38 style): set both, or neither "
                "and use max_length"
            )
        if self.max_length is None and self.max_time is None:
            raise ValueError(
                "max_length is required (or, 0.38 style, time_metric and max_time); "
                "e.g. max_length: {batches: 1000}"
            )
        return self


class SingleConfig(_SearcherBase):
    """``name: single``: one trial with the given hyperparameters (constants or sampled once).
    ``max_length`` may be left out in 0.38 style (the trial decides its own length)."""

    name: Literal["single"] = "single"
    max_length: SearcherLength | None = None


class RandomConfig(_SearcherBase):
    """``name: random``: ``max_trials`` trials with sampled hyperparameters."""

    name: Literal["random"] = "random"
    max_length: SearcherLength | None = None
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)


class GridConfig(_SearcherBase):
    """``name: grid``: one trial per point of the hyperparameter grid (``count`` required on
    int/double/log hyperparameters; ``max_trials`` is not a grid field)."""

    name: Literal["grid"] = "grid"
    max_length: SearcherLength | None = None
    max_concurrent_trials: int = Field(default=16, ge=0)


class AsyncHalvingConfig(_TimeMetric):
    """``name: async_halving``: one ASHA bracket of ``num_rungs`` rungs."""

    name: Literal["async_halving"] = "async_halving"
    num_rungs: int = Field(ge=1)
    max_trials: int = Field(ge=1)
    divisor: float = Field(default=4.0, gt=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    stop_once: bool = False


class AdaptiveASHAConfig(_TimeMetric):
    """``name: adaptive_asha``: several ASHA brackets chosen by ``mode``."""

    name: Literal["adaptive_asha"] = "adaptive_asha"
    max_trials: int = Field(ge=1)
    bracket_rungs: list[int] = Field(default_factory=list)
    divisor: float = Field(default=4.0, gt=1)
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    max_rungs: int = Field(default=5, ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    stop_once: bool = False


class CustomConfig(_SearcherBase):
    """``name: custom`` (0.37; removed in 0.38): a client drives the search. ``unit`` names the
    unit of its lengths. Other keys are kept, as the reference's schema allows them."""

    model_config = ConfigDict(extra="allow")

    name: Literal["custom"] = "custom"
    unit: Literal["batches", "records", "epochs"] | None = None


class TPEConfig(_TimeMetric):
    """``name: tpe`` (beyond the reference): ``max_trials`` trials whose hyperparameters come
    from optuna's TPE sampler after ``n_startup_trials`` random ones; ``num_rungs > 1`` adds
    stop-based ASHA early stopping with ``divisor``."""

    name: Literal["tpe"] = "tpe"
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    num_rungs: int = Field(default=1, ge=1)
    divisor: float = Field(default=4.0, gt=1)
    n_startup_trials: int = Field(default=10, ge=1)


SearcherConfig = Union[
    SingleConfig,
    RandomConfig,
    GridConfig,
    AsyncHalvingConfig,
    AdaptiveASHAConfig,
    CustomConfig,
    TPEConfig,
]

SEARCHERS: dict[str, type[Section]] = {
    "single": SingleConfig,
    "random": RandomConfig,
    "grid": GridConfig,
    "async_halving": AsyncHalvingConfig,
    "adaptive_asha": AdaptiveASHAConfig,
    "custom": CustomConfig,
    "tpe": TPEConfig,
}
# Searchers the reference can still parse but refuses for new experiments.
_REMOVED = {
    "adaptive": "adaptive_asha",
    "adaptive_simple": "adaptive_asha",
    "sync_halving": "async_halving",
    "pbt": "adaptive_asha",
}


def parse_searcher(raw: Any, problems: Problems) -> SearcherConfig | None:
    """The model for a ``searcher`` section, dispatched on ``name``; None (with problems
    recorded) when it is missing or invalid."""
    if raw is None:
        problems.append(("searcher", "is required, e.g. {name: single, metric: loss, ...}"))
        return None
    if not isinstance(raw, dict):
        problems.append(("searcher", f"must be a mapping (got {raw!r})"))
        return None
    name = raw.get("name")
    names = ", ".join(SEARCHERS)
    if name is None:
        problems.append(("searcher.name", f"is required; use one of {names}"))
        return None
    if isinstance(name, str) and name in _REMOVED:
        problems.append(
            (
                "searcher.name",
                f"the {name!r} searcher has been removed; use {_REMOVED[name]!r} instead",
            )
        )
        return None
    model = SEARCHERS.get(name) if isinstance(name, str) else None
    if model is None:
        problems.append(("searcher.name", f"unknown searcher {name!r}; use one of {names}"))
        return None
    if name == "grid" and raw.get("max_trials") is not None:
        problems.append(
            (
                "searcher.max_trials",
                "is not a grid field: a grid runs one trial per point; size the grid with "
                "`count` on each int/double/log hyperparameter",
            )
        )
        raw = {k: v for k, v in raw.items() if k != "max_trials"}
    return validate(model, raw, "searcher", problems)  # type: ignore[return-value]
