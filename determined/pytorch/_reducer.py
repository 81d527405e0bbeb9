"""Metric reduction: the ``Reducer`` enum for ``evaluation_reducer()``, ``MetricReducer`` for
custom cross-rank reductions, and the two-stage (per rank, then across ranks) reduction of
validation metrics."""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from determined import errors


class Reducer(enum.Enum):
    """How a validation metric is combined over batches and ranks."""

    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


class MetricReducer(abc.ABC):
    """A custom metric computed across all of a validation's (or training chunk's) batches.

    ``update`` is called by user code; at a reporting boundary each rank's
    ``per_slot_reduce()`` result is gathered to the chief, which calls ``cross_slot_reduce``.
    """

    @abc.abstractmethod
    def reset(self) -> None:
        """Clear accumulated state; called before each training chunk and each validation."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This rank's partial result; must be picklable."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        """Combine every rank's partial result (chief only). A dict result is merged into the
        metrics when the reducer was wrapped without a name."""


class _SimpleReducer(MetricReducer):
    """Wraps ``fn(values) -> metric``: collects ``update(v)`` values, interleaves ranks
    round-robin, and applies ``fn``."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self._fn = fn
        self._values: list[Any] = []

    def update(self, value: Any) -> None:
        self._values.append(value)

    def reset(self) -> None:
        self._values = []

    def per_slot_reduce(self) -> Any:
        return self._values

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        longest = max((len(v) for v in per_slot_metrics), default=0)
        merged = [v[i] for i in range(longest) for v in per_slot_metrics if i < len(v)]
        return self._fn(merged)


class _WrappedReducer:
    def __init__(self, reducer: MetricReducer, name: str | None, training: bool, val: bool):
        self.reducer = reducer
        self.name = name
        self.for_training = training
        self.for_validation = val


def _wrap_reducer(
    registered: list[_WrappedReducer],
    reducer: Callable[[list[Any]], Any] | MetricReducer,
    name: str | None,
    for_training: bool,
    for_validation: bool,
) -> MetricReducer:
    """Register ``reducer`` in ``registered``; a plain function ``fn(values)`` becomes a reducer
    with ``update(value)``. Returns the reducer to call ``update`` on. Shared by
    ``PyTorchTrialContext`` and ``TorchBatchProcessorContext``."""
    if any(w.reducer is reducer for w in registered):
        raise AssertionError(f"reducer {reducer!r} is already wrapped")
    if isinstance(reducer, MetricReducer):
        wrapped: MetricReducer = reducer
    elif callable(reducer):
        wrapped = _SimpleReducer(reducer)
    else:
        raise AssertionError(f"wrap_reducer needs a MetricReducer or a function: {reducer!r}")
    registered.append(_WrappedReducer(wrapped, name, for_training, for_validation))
    return wrapped


def _run_reducers(
    wrapped: Sequence[_WrappedReducer], gather: Callable[[Any], list[Any] | None]
) -> dict[str, Any]:
    """Gather every reducer's per-slot result to the chief and cross-reduce it there; workers
    get ``{}``. A collective: every rank calls it with the same reducers."""
    partials = gather([w.reducer.per_slot_reduce() for w in wrapped])
    return {} if partials is None else _cross_slot_reduce(wrapped, partials)


def _cross_slot_reduce(wrapped: Sequence[_WrappedReducer], partials: list[Any]) -> dict[str, Any]:
    """Metrics by name from ``partials`` (per rank, one per-slot result per reducer)."""
    out: dict[str, Any] = {}
    for i, w in enumerate(wrapped):
        try:
            value = w.reducer.cross_slot_reduce([p[i] for p in partials])
        except Exception as e:
            raise ValueError(f"metric reducer {w.reducer!r} raised: {e}") from e
        if w.name is None:
            if not isinstance(value, dict):
                raise AssertionError(
                    f"reducer {w.reducer!r} was wrapped without a name, so it must return a dict "
                    f"of metrics, not {type(value).__name__}"
                )
            out.update(value)
        else:
            if isinstance(value, dict):
                raise AssertionError(
                    f"reducer {w.name!r} has a name, so it must return one value, not a dict"
                )
            out[w.name] = value
    return out


def _apply(reducer: Reducer, values: Sequence[Any], weights: Sequence[int] | None = None) -> Any:
    if reducer == Reducer.AVG:
        return np.average(np.asarray(values, dtype=float), axis=0, weights=weights)
    if reducer == Reducer.SUM:
        return np.sum(values, axis=0)
    if reducer == Reducer.MAX:
        return np.max(values, axis=0)
    if reducer == Reducer.MIN:
        return np.min(values, axis=0)
    raise errors.InternalException(f"unknown reducer {reducer!r}")


def _reducers_for(keys: Sequence[str], spec: Reducer | dict[str, Reducer]) -> dict[str, Reducer]:
    if isinstance(spec, Reducer):
        return dict.fromkeys(keys, spec)
    if set(spec) != set(keys):
        raise errors.InvalidExperimentException(
            f"evaluation_reducer() returned reducers for {sorted(spec)}, but evaluate_batch "
            f"returned metrics {sorted(keys)}: give exactly one Reducer per metric"
        )
    return dict(spec)


def _per_rank_reduce(
    batches: list[dict[str, Any]], spec: Reducer | dict[str, Reducer]
) -> dict[str, Any]:
    """Reduce one rank's per-batch validation metrics (AVG is an unweighted batch mean)."""
    if not batches:
        return {}
    keys = list(batches[0])
    reducers = _reducers_for(keys, spec)
    return {k: _apply(reducers[k], [b[k] for b in batches]) for k in keys}


def _cross_rank_reduce(
    per_rank: list[tuple[dict[str, Any], int]], spec: Reducer | dict[str, Reducer]
) -> dict[str, Any]:
    """Combine ``(metrics, num_batches)`` from every rank; AVG is weighted by batch count."""
    present = [(m, n) for m, n in per_rank if n > 0]
    if not present:
        return {}
    keys = list(present[0][0])
    reducers = _reducers_for(keys, spec)
    out: dict[str, Any] = {}
    for k in keys:
        values = [m[k] for m, _ in present]
        weights = [n for _, n in present] if reducers[k] == Reducer.AVG else None
        out[k] = _to_python(_apply(reducers[k], values, weights))
    return out


def _to_python(value: Any) -> Any:
    arr = np.asarray(value)
    return arr.item() if arr.ndim == 0 else arr.tolist()
