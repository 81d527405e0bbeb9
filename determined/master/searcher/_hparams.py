"""Hyperparameter spaces: parsing, random sampling and grid expansion.

A space is parsed once from the experiment config's ``hyperparameters`` section. Sampling draws
from the searcher's :class:`NpRand` in the reference's order (names sorted, nested names sorted
too: the reference visits nested names in Go map order, which is not reproducible).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from determined.errors import InvalidSearcherConfig
from determined.master.searcher._nprand import NpRand

# Bounds on what one config may ask for (each trial is a row and a run; every leaf goes into
# every trial's DET_HPARAMS).
MAX_HYPERPARAMETERS = 1000
MAX_GRID_POINTS = 100_000


@dataclass(frozen=True)
class Const:
    val: Any


@dataclass(frozen=True)
class Int:
    minval: int
    maxval: int
    count: int | None = None


@dataclass(frozen=True)
class Double:
    minval: float
    maxval: float
    count: int | None = None


@dataclass(frozen=True)
class Log:
    minval: float
    maxval: float
    base: float
    count: int | None = None


@dataclass(frozen=True)
class Categorical:
    vals: tuple[Any, ...]


@dataclass(frozen=True)
class Nested:
    params: dict[str, Hyperparameter]


Hyperparameter = Union[Const, Int, Double, Log, Categorical, Nested]
HyperparameterSpace = dict[str, Hyperparameter]
Path = tuple[str, ...]


def _number(raw: Mapping[str, Any], key: str, where: str, *, integer: bool = False) -> Any:
    if key not in raw:
        raise InvalidSearcherConfig(f"hyperparameter {where!r} needs {key!r}")
    value = raw[key]
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        kind = "an integer" if integer else "a number"
        raise InvalidSearcherConfig(
            f"hyperparameter {where!r}: {key} must be {kind}, got {value!r}"
        )
    return value


def _count(raw: Mapping[str, Any], where: str) -> int | None:
    if raw.get("count") is None:
        return None
    count = _number(raw, "count", where, integer=True)
    if count < 1:
        raise InvalidSearcherConfig(f"hyperparameter {where!r}: count must be >= 1, got {count}")
    return int(count)


def _bounds(raw: Mapping[str, Any], where: str, *, integer: bool) -> tuple[Any, Any]:
    lo = _number(raw, "minval", where, integer=integer)
    hi = _number(raw, "maxval", where, integer=integer)
    if not lo < hi:
        raise InvalidSearcherConfig(
            f"hyperparameter {where!r}: minval ({lo}) must be less than maxval ({hi})"
        )
    return lo, hi


def _parse_typed(raw: Mapping[str, Any], where: str) -> Hyperparameter:
    kind = raw["type"]
    if kind == "const":
        if "val" not in raw:
            raise InvalidSearcherConfig(f"hyperparameter {where!r} of type const needs 'val'")
        return Const(raw["val"])
    if kind == "int":
        lo, hi = _bounds(raw, where, integer=True)
        return Int(int(lo), int(hi), _count(raw, where))
    if kind == "double":
        lo, hi = _bounds(raw, where, integer=False)
        return Double(float(lo), float(hi), _count(raw, where))
    if kind == "log":
        lo, hi = _bounds(raw, where, integer=False)
        base = _number(raw, "base", where)
        if base <= 0:
            raise InvalidSearcherConfig(f"hyperparameter {where!r}: base must be > 0, got {base}")
        return Log(float(lo), float(hi), float(base), _count(raw, where))
    if kind == "categorical":
        vals = raw.get("vals")
        if not isinstance(vals, list) or not vals:
            raise InvalidSearcherConfig(
                f"hyperparameter {where!r} of type categorical needs a non-empty list 'vals'"
            )
        return Categorical(tuple(vals))
    raise InvalidSearcherConfig(
        f"hyperparameter {where!r} has unknown type {kind!r}; "
        "use const, int, double, log or categorical (or no 'type' for a nested group)"
    )


def _parse_one(raw: Any, where: str) -> Hyperparameter:
    if not isinstance(raw, Mapping):
        return Const(raw)
    if "type" in raw:
        return _parse_typed(raw, where)
    return Nested({k: _parse_one(v, f"{where}.{k}") for k, v in sorted(raw.items())})


def parse_hyperparameters(raw: Mapping[str, Any] | None) -> HyperparameterSpace:
    """Parse the ``hyperparameters`` section: scalars and lists are constants, a mapping with
    ``type`` is a typed hyperparameter, a mapping without one is a nested group.

    Raises:
        InvalidSearcherConfig: an unknown type, missing or ill-ordered bounds, a bad count.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidSearcherConfig(f"hyperparameters must be a mapping, got {raw!r}")
    space = {str(k): _parse_one(v, str(k)) for k, v in sorted(raw.items())}
    count = len(leaves(space))
    if count > MAX_HYPERPARAMETERS:
        raise InvalidSearcherConfig(
            f"hyperparameters has {count} entries (nested ones included); the limit is "
            f"{MAX_HYPERPARAMETERS}: pass large settings in a file of the model definition"
        )
    return space


def _sample_one(hp: Hyperparameter, rand: NpRand) -> Any:
    if isinstance(hp, Const):
        return hp.val
    if isinstance(hp, Int):
        return hp.minval + rand.intn(hp.maxval - hp.minval + 1)
    if isinstance(hp, Double):
        return rand.uniform(hp.minval, hp.maxval)
    if isinstance(hp, Log):
        return math.pow(hp.base, rand.uniform(hp.minval, hp.maxval))
    if isinstance(hp, Categorical):
        return hp.vals[rand.intn(len(hp.vals))]
    return {k: _sample_one(v, rand) for k, v in sorted(hp.params.items())}


def sample(space: HyperparameterSpace, rand: NpRand) -> dict[str, Any]:
    """One random point of ``space``; int bounds inclusive, double/log upper bound exclusive."""
    return {name: _sample_one(hp, rand) for name, hp in sorted(space.items())}


def leaves(space: Mapping[str, Hyperparameter], prefix: Path = ()) -> list[tuple[Path, Any]]:
    """Every non-nested hyperparameter with its path, names sorted at each level."""
    out: list[tuple[Path, Any]] = []
    for name, hp in sorted(space.items()):
        if isinstance(hp, Nested):
            out.extend(leaves(hp.params, (*prefix, name)))
        else:
            out.append(((*prefix, name), hp))
    return out


def set_path(sample_: dict[str, Any], path: Path, value: Any) -> None:
    """Set ``value`` at ``path`` in a nested sample dict, creating groups on the way."""
    node = sample_
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _round_half_away(x: float) -> int:
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return int(t)


def _need_count(hp: Int | Double | Log, path: Path) -> int:
    if hp.count is None:
        raise InvalidSearcherConfig(
            f"grid search is in use but count was not provided for hyperparameter "
            f"{'.'.join(path)!r}; add `count: N` to it"
        )
    return hp.count


def _axis_size(path: Path, hp: Hyperparameter) -> int:
    """How many values :func:`_axis` gives, without making them."""
    if isinstance(hp, Const):
        return 1
    if isinstance(hp, Categorical):
        return len(hp.vals)
    if isinstance(hp, Int):
        return min(_need_count(hp, path), hp.maxval - hp.minval + 1)
    assert isinstance(hp, (Double, Log))
    return _need_count(hp, path)


def _axis(path: Path, hp: Hyperparameter) -> list[Any]:
    if isinstance(hp, Const):
        return [hp.val]
    if isinstance(hp, Categorical):
        return list(hp.vals)
    if isinstance(hp, Int):
        c = min(_need_count(hp, path), hp.maxval - hp.minval + 1)
        if c == 1:
            return [_round_half_away((hp.minval + hp.maxval) / 2.0)]
        span = hp.maxval - hp.minval
        return [_round_half_away(hp.minval + (i * span) / (c - 1)) for i in range(c)]
    assert isinstance(hp, (Double, Log))
    c = _need_count(hp, path)
    if c == 1:
        points = [(hp.minval + hp.maxval) / 2.0]
    else:
        points = [hp.minval + i * (hp.maxval - hp.minval) / (c - 1) for i in range(c)]
    if isinstance(hp, Log):
        return [math.pow(hp.base, p) for p in points]
    return points


def grid(space: HyperparameterSpace) -> list[dict[str, Any]]:
    """The cartesian product of every leaf's grid axis, first axis (sorted names) slowest.

    With no hyperparameters at all the grid is one empty point (the reference yields no point
    and never finishes; see docs/master/searchers.md).

    Raises:
        InvalidSearcherConfig: an int/double/log hyperparameter without ``count``.
    """
    sizes = [(path, _axis_size(path, hp)) for path, hp in leaves(space)]
    total = math.prod(size for _, size in sizes)
    if total > MAX_GRID_POINTS:
        biggest = ", ".join(
            f"{'.'.join(p)}: {n}" for p, n in sorted(sizes, key=lambda x: -x[1])[:3]
        )
        raise InvalidSearcherConfig(
            f"the grid has {total} points; the limit is {MAX_GRID_POINTS} trials. Lower the "
            f"`count` (or the values) of its largest axes ({biggest})"
        )
    axes = [(path, _axis(path, hp)) for path, hp in leaves(space)]
    points: list[dict[str, Any]] = []
    for combo in itertools.product(*(values for _, values in axes)):
        point: dict[str, Any] = {}
        for (path, _), value in zip(axes, combo, strict=True):
            set_path(point, path, value)
        points.append(point)
    return points
