"""Hyperparameter spaces: typed models of the five hyperparameter kinds, nested dicts of them,
and the parser that turns the ``hyperparameters`` section into a space.

A space is a dict from name to a hyperparameter model or to a nested space (a mapping without
``type`` in the config). Bare values (numbers, strings, lists, booleans, null) are constants.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal, Union

from pydantic import Field, model_validator

from determined.common.expconf._base import Problems, Section, validate


class ConstHP(Section):
    """``{type: const, val: X}``, or any bare value."""

    _null_means_default: ClassVar[bool] = False

    type: Literal["const"] = "const"
    val: Any = Field(...)


class _Range(Section):
    @model_validator(mode="after")
    def _ordered(self) -> _Range:
        lo, hi = getattr(self, "minval"), getattr(self, "maxval")  # noqa: B009
        if not lo < hi:
            raise ValueError(f"minval must be less than maxval (got minval={lo}, maxval={hi})")
        return self


class IntHP(_Range):
    """``{type: int, minval, maxval, count?}``: integers in [minval, maxval], both included."""

    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)


class DoubleHP(_Range):
    """``{type: double, minval, maxval, count?}``: floats in [minval, maxval)."""

    type: Literal["double"] = "double"
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)


class LogHP(_Range):
    """``{type: log, minval, maxval, base, count?}``: ``base ** x`` for x in [minval, maxval)."""

    type: Literal["log"] = "log"
    minval: float
    maxval: float
    base: float = Field(gt=0)
    count: int | None = Field(default=None, ge=1)


class CategoricalHP(Section):
    """``{type: categorical, vals: [...]}``: one of ``vals`` (at least one)."""

    type: Literal["categorical"] = "categorical"
    vals: list[Any] = Field(min_length=1)


Hyperparameter = Union[ConstHP, IntHP, DoubleHP, LogHP, CategoricalHP]
# name -> Hyperparameter, or name -> nested space (a dict of the same shape).
HyperparameterSpace = dict[str, Any]

_KINDS: dict[str, type[Section]] = {
    "const": ConstHP,
    "int": IntHP,
    "double": DoubleHP,
    "log": LogHP,
    "categorical": CategoricalHP,
}
_GRID_MSG = "grid search is in use but count was not provided"


def _parse_one(raw: Mapping[str, Any], path: str, problems: Problems, grid: bool) -> Any:
    kind = raw["type"]
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        problems.append(
            (
                f"{path}.type",
                f"unknown hyperparameter type {kind!r}; use one of "
                "const, int, double, log, categorical",
            )
        )
        return None
    hp = validate(model, dict(raw), path, problems)
    if grid and isinstance(hp, (IntHP, DoubleHP, LogHP)) and hp.count is None:
        problems.append((f"{path}.count", _GRID_MSG))
    return hp


def parse_hyperparameters(
    raw: Any, problems: Problems, *, grid: bool = False, prefix: str = "hyperparameters"
) -> HyperparameterSpace:
    """The space for a ``hyperparameters`` section. Problems are appended to ``problems`` with
    their key paths; ``grid`` adds the grid searcher's rule that int/double/log need ``count``.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append((prefix, f"must be a mapping of names to hyperparameters (got {raw!r})"))
        return {}
    space: HyperparameterSpace = {}
    for name, value in raw.items():
        path = f"{prefix}.{name}"
        if not isinstance(name, str):
            problems.append((path, f"hyperparameter names must be strings (got {name!r})"))
            continue
        if isinstance(value, Mapping) and "type" in value:
            space[name] = _parse_one(value, path, problems, grid)
        elif isinstance(value, Mapping):
            space[name] = parse_hyperparameters(value, problems, grid=grid, prefix=path)
        else:
            space[name] = ConstHP(val=value)
    return space


def iter_hyperparameters(
    space: HyperparameterSpace, _prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Hyperparameter]]:
    """Every leaf of ``space`` as ``(path, hyperparameter)``, names sorted at every level (the
    order searchers sample and expand grids in)."""
    for name in sorted(space):
        value = space[name]
        if isinstance(value, dict):
            yield from iter_hyperparameters(value, (*_prefix, name))
        else:
            yield (*_prefix, name), value


def hyperparameters_to_json(space: HyperparameterSpace) -> dict[str, Any]:
    """The defaulted config form: every leaf as its typed object (bare values become
    ``{type: const, val}``), nested spaces as nested objects."""
    out: dict[str, Any] = {}
    for name, value in space.items():
        if isinstance(value, dict):
            out[name] = hyperparameters_to_json(value)
        else:
            out[name] = value.to_json_dict()
    return out
