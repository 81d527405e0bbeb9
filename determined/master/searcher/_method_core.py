"""The inside of a search method: a core that makes decisions, and where new trials come from.

A :class:`MethodCore` is the method-specific state machine (random, grid, one ASHA bracket...).
It is driven by :class:`~determined.master.searcher._method.SearcherBase`, which owns the
bookkeeping every method shares (shutdown, duplicate events, progress). A core gets a
:class:`SearchContext` with the seeded RNG and a :class:`Sampler`; a Create's randomness is
consumed in the reference's order: hyperparameters, then the request id, then the trial seed.
"""

from __future__ import annotations

import math
from typing import Any

from determined.master.searcher import _hparams
from determined.master.searcher._nprand import NpRand
from determined.master.searcher._operations import Create, ExitedReason, Operation


class Sampler:
    """Random sampling from the space (the reference's behaviour). Model-based samplers (TPE)
    override the hooks, which cores call as results come in."""

    def sample(self, space: _hparams.HyperparameterSpace, rand: NpRand) -> tuple[dict, Any]:
        """A new point and a handle that :meth:`bind` later ties to the trial's request id."""
        return _hparams.sample(space, rand), None

    def bind(self, handle: Any, request_id: str) -> None:
        """Tie the point drawn with ``handle`` to ``request_id``."""

    def report(self, request_id: str, length: int, metric: float) -> None:
        """An intermediate searcher metric (as reported, before any sign flip)."""

    def finish(self, request_id: str, metric: float) -> None:
        """The trial trained to the end; ``metric`` is its final searcher metric."""

    def prune(self, request_id: str) -> None:
        """The trial was stopped early because its metric ranked low."""

    def fail(self, request_id: str) -> None:
        """The trial errored, was canceled or reported invalid hyperparameters."""

    def state(self) -> Any:
        return None

    def load_state(self, state: Any) -> None:
        """Restore what :meth:`state` returned."""


class SearchContext:
    """What a core may use to make new trials: the RNG, the space and the sampler."""

    def __init__(self, rand: NpRand, space: _hparams.HyperparameterSpace, sampler: Sampler):
        self.rand = rand
        self.space = space
        self.sampler = sampler

    def create(self, hparams: dict[str, Any] | None = None) -> Create:
        """A Create for a new trial, sampled unless ``hparams`` is given (grid points)."""
        handle = None
        if hparams is None:
            hparams, handle = self.sampler.sample(self.space, self.rand)
        request_id = self.rand.request_id()
        trial_seed = self.rand.trial_seed()
        if handle is not None:
            self.sampler.bind(handle, request_id)
        return Create(request_id, hparams, None, trial_seed)


class MethodCore:
    """One method's decisions. Every handler returns operations; the default does nothing.

    ``closed`` passed to :meth:`progress` is the set of trials the master reported closed, and
    ``trial_progress`` covers every created trial that did not report invalid hyperparameters.
    """

    #: the method ranks trials by their metric, so the metric must be a number
    needs_numeric_metric = False
    #: every validation of a trial is an event (0.38 ``time_metric``), not just op completions
    every_validation = False
    #: 0.38 style without ``searcher.max_length``: trials get no ValidateAfter; each trains as
    #: long as it decides and its exit 0 (without a preemption) ends it
    trials_decide_length = False

    def initial(self, ctx: SearchContext) -> list[Operation]:
        raise NotImplementedError

    def created(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        return []

    def validated(
        self, ctx: SearchContext, request_id: str, metric: Any, length: int
    ) -> list[Operation]:
        return []

    def exited_early(
        self, ctx: SearchContext, request_id: str, reason: ExitedReason
    ) -> list[Operation]:
        return []

    def closed(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        return []

    def progress(self, trial_progress: dict[str, float], closed: set[str]) -> float:
        raise NotImplementedError

    def rung_lengths(self) -> list[list[int]]:
        """Per bracket, the lengths its rungs train to (one bracket, one rung by default)."""
        return []

    def state(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError


def float_to_json(x: float) -> float | str:
    """Metrics in snapshots stay strict JSON: non-finite values become the harness's strings."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def float_from_json(x: float | str) -> float:
    return float(x)
