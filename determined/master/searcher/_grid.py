"""``grid`` search: one trial per point of the hyperparameter grid."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined.master.searcher import _hparams
from determined.master.searcher._method import SearcherBase
from determined.master.searcher._method_core import MethodCore, SearchContext
from determined.master.searcher._operations import Close, Operation, ValidateAfter


class _GridCore(MethodCore):
    def __init__(self, max_length: int | None, mct: int, points: list[dict[str, Any]]) -> None:
        self.max_length = max_length
        self.trials_decide_length = max_length is None
        self.mct = mct
        self.total = len(points)
        self.remaining = points  # consumed from the end, as in the reference

    def _next_point(self, ctx: SearchContext) -> list[Operation]:
        create = ctx.create(self.remaining.pop())
        rid = create.request_id
        if self.max_length is None:
            return [create, Close(rid)]  # the trial trains as long as it decides
        return [create, ValidateAfter(rid, self.max_length), Close(rid)]

    def initial(self, ctx: SearchContext) -> list[Operation]:
        n = min(self.total, self.mct) if self.mct > 0 else self.total
        return [op for _ in range(n) for op in self._next_point(ctx)]

    def closed(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        return self._next_point(ctx) if self.remaining else []

    def rung_lengths(self) -> list[list[int]]:
        return [[]] if self.max_length is None else [[self.max_length]]

    def progress(self, trial_progress: dict[str, float], closed: set[str]) -> float:
        if self.max_length is None:
            # Each point counts 1: its raw progress reports give the fraction it has done.
            points = sum(1.0 if r in closed else min(v, 1.0) for r, v in trial_progress.items())
            return points / self.total
        done: float = len(closed) * self.max_length
        done += sum(v for r, v in trial_progress.items() if r not in closed)
        return done / (self.max_length * self.total)

    def state(self) -> dict[str, Any]:
        return {"remaining": self.remaining}

    def load_state(self, state: dict[str, Any]) -> None:
        self.remaining = list(state["remaining"])


class GridSearch(SearcherBase):
    """``grid``: every point of the cartesian product of the hyperparameters' grid axes, last
    point first, at most ``max_concurrent_trials`` at a time (0: all). Each trial gets
    ``ValidateAfter(max_length)`` and ``Close`` (``max_length`` None: only ``Close``, the trial
    decides its length); a trial with invalid hyperparameters is not replaced (it is one
    point of the grid).

    Raises:
        InvalidSearcherConfig: an int/double/log hyperparameter without ``count``.
    """

    def __init__(
        self,
        *,
        max_length: int | None,
        max_concurrent_trials: int = 16,
        hparams: Mapping[str, Any] | None,
        seed: int,
    ) -> None:
        space = _hparams.parse_hyperparameters(hparams)
        core = _GridCore(max_length, max_concurrent_trials, _hparams.grid(space))
        super().__init__(core, space, seed, kind="grid")

    @property
    def num_points(self) -> int:
        """How many trials the grid runs."""
        core = self._core
        assert isinstance(core, _GridCore)
        return core.total
