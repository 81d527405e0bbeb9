"""Rung bookkeeping shared by the ASHA variants: targets, sorted metrics, Go's binary search."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from determined.master.searcher._method_core import float_from_json, float_to_json

#: the metric an exited trial is given at a rung: the worst possible (lower is better inside)
EXITED_METRIC = sys.float_info.max


def rung_targets(max_length: int, divisor: float, num_rungs: int) -> list[int]:
    """Rung i trains to ``max(floor(L / d**(R-1-i)), 1)``; the top rung is ``L``."""
    return [max(int(max_length / divisor ** (num_rungs - 1 - i)), 1) for i in range(num_rungs)]


def search(n: int, pred: Callable[[int], bool]) -> int:
    """Go's ``sort.Search``: the first index in ``[0, n)`` where ``pred`` holds, by bisection
    (so results match the reference even when NaN metrics make ``pred`` non-monotone)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if not pred(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass
class TrialMetric:
    request_id: str
    metric: float
    promoted: bool = False


@dataclass
class Rung:
    """Metrics reported at one rung, ascending (lower is better), plus trials still training
    towards it."""

    metrics: list[TrialMetric] = field(default_factory=list)
    outstanding: int = 0

    def insert(self, request_id: str, metric: float, *, ties_first: bool) -> int:
        """Insert in sorted position (before equal metrics if ``ties_first``, else after)."""
        if ties_first:
            idx = search(len(self.metrics), lambda i: self.metrics[i].metric >= metric)
        else:
            idx = search(len(self.metrics), lambda i: self.metrics[i].metric > metric)
        self.metrics.insert(idx, TrialMetric(request_id, metric))
        return idx

    def remove(self, request_id: str) -> None:
        for i, tm in enumerate(self.metrics):
            if tm.request_id == request_id:
                del self.metrics[i]
                return

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": [[m.request_id, float_to_json(m.metric), m.promoted] for m in self.metrics],
            "outstanding": self.outstanding,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rung:
        metrics = [TrialMetric(r, float_from_json(m), bool(p)) for r, m, p in data["metrics"]]
        return cls(metrics, int(data["outstanding"]))
