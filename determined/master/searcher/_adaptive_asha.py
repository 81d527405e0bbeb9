"""``async_halving`` and ``adaptive_asha``: one ASHA bracket, or several run side by side.

adaptive_asha picks bracket sizes (rung counts) from ``mode``, splits ``max_trials`` so each
bracket gets a similar training budget, splits ``max_concurrent_trials`` evenly, and routes
every event to the bracket that created the trial. Progress is the mean over brackets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from determined.errors import InvalidSearcherConfig
from determined.master.searcher._asha import AshaCoreBase, AshaPromotionCore
from determined.master.searcher._asha_stopping import AshaStoppingCore, AshaTimeCore
from determined.master.searcher._method import SearcherBase
from determined.master.searcher._method_core import MethodCore, Sampler, SearchContext
from determined.master.searcher._operations import Create, ExitedReason, Operation

MODES = ("aggressive", "standard", "conservative")


@dataclass(frozen=True)
class Bracket:
    """One bracket of an adaptive_asha search: its rung count, trial budget and concurrency."""

    num_rungs: int
    max_trials: int
    max_concurrent_trials: int


def bracket_rungs_for_mode(mode: str, max_rungs: int) -> list[int]:
    """aggressive: ``[R]``; standard: ``[(R-1)//2+1 .. R]``; conservative: ``[1 .. R]``."""
    if mode == "aggressive":
        return [max_rungs]
    if mode == "standard":
        return list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))
    if mode == "conservative":
        return list(range(1, max_rungs + 1))
    raise InvalidSearcherConfig(
        f"adaptive_asha mode must be one of {', '.join(MODES)}, got {mode!r}"
    )


def plan_brackets(
    *,
    max_length: int,
    max_trials: int,
    divisor: float,
    max_rungs: int,
    mode: str,
    bracket_rungs: Sequence[int] = (),
    max_concurrent_trials: int = 16,
) -> list[Bracket]:
    """The brackets adaptive_asha runs, most aggressive (most rungs) first."""
    rungs = list(bracket_rungs)
    if not rungs:
        r = min(
            max_rungs,
            int(math.log(max_length) / math.log(divisor)) + 1,
            int(math.log(max_trials) / math.log(divisor)) + 1,
        )
        rungs = bracket_rungs_for_mode(mode, r)
    rungs.sort(reverse=True)
    weights = [divisor ** (n - 1) / n for n in rungs]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    nb = len(rungs)
    if max_concurrent_trials == 0:
        conc = [max(trials[-1], int(divisor))] * nb
    else:
        m = max(max_concurrent_trials, nb)
        conc = [m // nb + (1 if i < m % nb else 0) for i in range(nb)]
    return [Bracket(n, t, c) for n, t, c in zip(rungs, trials, conc, strict=True)]


class _TournamentCore(MethodCore):
    """Sub-searches side by side; each event goes to the sub-search that created the trial."""

    def __init__(self, subs: list[AshaCoreBase]):
        self.subs = subs
        self.table: dict[str, int] = {}
        self.needs_numeric_metric = True
        self.every_validation = subs[0].every_validation

    def _mark(self, i: int, ops: list[Operation]) -> list[Operation]:
        for op in ops:
            if isinstance(op, Create):
                self.table[op.request_id] = i
        return ops

    def initial(self, ctx: SearchContext) -> list[Operation]:
        return [op for i, sub in enumerate(self.subs) for op in self._mark(i, sub.initial(ctx))]

    def created(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        i = self.table[request_id]
        return self._mark(i, self.subs[i].created(ctx, request_id))

    def validated(
        self, ctx: SearchContext, request_id: str, metric: Any, length: int
    ) -> list[Operation]:
        i = self.table[request_id]
        return self._mark(i, self.subs[i].validated(ctx, request_id, metric, length))

    def exited_early(
        self, ctx: SearchContext, request_id: str, reason: ExitedReason
    ) -> list[Operation]:
        i = self.table[request_id]
        return self._mark(i, self.subs[i].exited_early(ctx, request_id, reason))

    def closed(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        i = self.table[request_id]
        return self._mark(i, self.subs[i].closed(ctx, request_id))

    def rung_lengths(self) -> list[list[int]]:
        return [lengths for sub in self.subs for lengths in sub.rung_lengths()]

    def bracket_of(self, request_id: str) -> int | None:
        return self.table.get(request_id)

    def progress(self, trial_progress: dict[str, float], closed: set[str]) -> float:
        total = 0.0
        for i, sub in enumerate(self.subs):
            mine = {r: v for r, v in trial_progress.items() if self.table.get(r) == i}
            total += sub.progress(mine, {r for r in closed if self.table.get(r) == i})
        return total / len(self.subs)

    def state(self) -> dict[str, Any]:
        return {"table": self.table, "subs": [s.state() for s in self.subs]}

    def load_state(self, state: dict[str, Any]) -> None:
        self.table = {k: int(v) for k, v in state["table"].items()}
        for sub, sub_state in zip(self.subs, state["subs"], strict=True):
            sub.load_state(sub_state)


def _bracket_core(
    *,
    variant: str,
    max_length: int,
    bracket: Bracket,
    divisor: float,
    smaller_is_better: bool,
) -> AshaCoreBase:
    core_cls = {"promote": AshaPromotionCore, "stop": AshaStoppingCore, "time": AshaTimeCore}
    return core_cls[variant](
        max_length=max_length,
        max_trials=bracket.max_trials,
        num_rungs=bracket.num_rungs,
        divisor=divisor,
        max_concurrent_trials=bracket.max_concurrent_trials,
        smaller_is_better=smaller_is_better,
    )


def _variant(stop_once: bool, time_metric: str | None) -> str:
    return "time" if time_metric else ("stop" if stop_once else "promote")


class ASHASearch(SearcherBase):
    """``async_halving``: one ASHA bracket of ``num_rungs`` rungs.

    ``stop_once`` false promotes the best ``1/divisor`` of each rung (waiting trials resume);
    true decides once per trial and rung and never resumes. With ``time_metric`` set (0.38
    style) ``max_length`` is ``max_time`` and every validation is judged (see
    :attr:`every_validation`).
    """

    def __init__(
        self,
        *,
        max_length: int,
        max_trials: int,
        num_rungs: int,
        divisor: float = 4.0,
        stop_once: bool = False,
        max_concurrent_trials: int = 16,
        smaller_is_better: bool = True,
        time_metric: str | None = None,
        hparams: Mapping[str, Any] | None,
        seed: int,
        sampler: Sampler | None = None,
    ) -> None:
        bracket = Bracket(num_rungs, max_trials, max_concurrent_trials)
        core = _bracket_core(
            variant=_variant(stop_once, time_metric),
            max_length=max_length,
            bracket=bracket,
            divisor=divisor,
            smaller_is_better=smaller_is_better,
        )
        super().__init__(core, hparams, seed, kind="async_halving", sampler=sampler)


class AdaptiveASHASearch(SearcherBase):
    """``adaptive_asha``: ASHA brackets chosen by ``mode`` (see :func:`plan_brackets`)."""

    def __init__(
        self,
        *,
        max_length: int,
        max_trials: int,
        divisor: float = 4.0,
        max_rungs: int = 5,
        mode: str = "standard",
        bracket_rungs: Sequence[int] = (),
        stop_once: bool = False,
        max_concurrent_trials: int = 16,
        smaller_is_better: bool = True,
        time_metric: str | None = None,
        hparams: Mapping[str, Any] | None,
        seed: int,
    ) -> None:
        self.brackets = plan_brackets(
            max_length=max_length,
            max_trials=max_trials,
            divisor=divisor,
            max_rungs=max_rungs,
            mode=mode,
            bracket_rungs=bracket_rungs,
            max_concurrent_trials=max_concurrent_trials,
        )
        subs = [
            _bracket_core(
                variant=_variant(stop_once, time_metric),
                max_length=max_length,
                bracket=b,
                divisor=divisor,
                smaller_is_better=smaller_is_better,
            )
            for b in self.brackets
        ]
        super().__init__(_TournamentCore(subs), hparams, seed, kind="adaptive_asha")
