"""``single`` and ``random`` search: independent trials, each trained to ``max_length`` (or,
without one, to the length the trial decides itself)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined.master.searcher._method import SearcherBase
from determined.master.searcher._method_core import MethodCore, SearchContext
from determined.master.searcher._operations import Close, ExitedReason, Operation, ValidateAfter


class _RandomCore(MethodCore):
    def __init__(
        self, max_length: int | None, max_trials: int, mct: int, replace_invalid: bool
    ) -> None:
        self.max_length = max_length
        self.trials_decide_length = max_length is None
        self.max_trials = max_trials
        self.mct = mct
        self.replace_invalid = replace_invalid
        self.created_trials = 0

    def _new_trial(self, ctx: SearchContext) -> list[Operation]:
        create = ctx.create()
        self.created_trials += 1
        rid = create.request_id
        if self.max_length is None:
            return [create, Close(rid)]  # the trial trains as long as it decides
        return [create, ValidateAfter(rid, self.max_length), Close(rid)]

    def initial(self, ctx: SearchContext) -> list[Operation]:
        n = min(self.max_trials, self.mct) if self.mct > 0 else self.max_trials
        return [op for _ in range(n) for op in self._new_trial(ctx)]

    def exited_early(
        self, ctx: SearchContext, request_id: str, reason: ExitedReason
    ) -> list[Operation]:
        # The replacement is created when the invalid trial's close arrives.
        if self.replace_invalid and reason.is_invalid_hp:
            self.created_trials -= 1
        return []

    def closed(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        return self._new_trial(ctx) if self.created_trials < self.max_trials else []

    def rung_lengths(self) -> list[list[int]]:
        return [[]] if self.max_length is None else [[self.max_length]]

    def progress(self, trial_progress: dict[str, float], closed: set[str]) -> float:
        if self.max_length is None:
            # Each trial counts 1: its raw progress reports give the fraction it has done.
            done = sum(1.0 if r in closed else min(v, 1.0) for r, v in trial_progress.items())
            return done / self.max_trials
        done = sum(self.max_length if r in closed else v for r, v in trial_progress.items())
        return done / (self.max_length * self.max_trials)

    def state(self) -> dict[str, Any]:
        return {"created_trials": self.created_trials}

    def load_state(self, state: dict[str, Any]) -> None:
        self.created_trials = int(state["created_trials"])


class RandomSearch(SearcherBase):
    """``random``: ``max_trials`` trials with randomly sampled hyperparameters, at most
    ``max_concurrent_trials`` at a time (0: all at once). Each trial gets
    ``ValidateAfter(max_length)`` and ``Close`` up front (``max_length`` None: only ``Close``,
    the trial decides its length); a closed trial makes room for the next. Errored and
    canceled trials count against ``max_trials``; a trial that reports invalid
    hyperparameters is replaced."""

    def __init__(
        self,
        *,
        max_length: int | None,
        max_trials: int,
        max_concurrent_trials: int = 16,
        hparams: Mapping[str, Any] | None,
        seed: int,
    ) -> None:
        core = _RandomCore(max_length, max_trials, max_concurrent_trials, replace_invalid=True)
        super().__init__(core, hparams, seed, kind="random")


class SingleSearch(SearcherBase):
    """``single``: one trial trained to ``max_length`` (None: to the length it decides);
    invalid hyperparameters end the search."""

    def __init__(
        self, *, max_length: int | None, hparams: Mapping[str, Any] | None, seed: int
    ) -> None:
        core = _RandomCore(max_length, 1, 1, replace_invalid=False)
        super().__init__(core, hparams, seed, kind="single")
