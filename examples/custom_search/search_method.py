"""A small Bayesian-style search method for ``determined.searcher``.

The first ``n_initial`` trials get random points. After that each new trial gets the best of
``n_candidates`` random candidates under a lower-confidence-bound acquisition: a kernel
regression of the finished trials' losses (mean) minus ``kappa`` times an uncertainty that
grows with the distance to the nearest finished point. Every trial trains ``length`` batches
and validates once; ``max_concurrent`` trials run at a time. The method's state (its RNG and
the results so far) is saved with the runner's, so a restarted runner continues the search.
"""

from __future__ import annotations

import json
import math
import pathlib
import random
import uuid
from typing import Any

from determined import searcher

# The search space: name -> (low, high, log scale)
SPACE = {"lr": (1e-3, 1.0, True), "momentum": (0.0, 0.95, False)}


def _to_unit(value: float, low: float, high: float, log: bool) -> float:
    if log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def _from_unit(u: float, low: float, high: float, log: bool) -> float:
    if log:
        return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    return low + u * (high - low)


class BayesianSearch(searcher.SearchMethod):
    def __init__(
        self,
        max_trials: int = 8,
        max_concurrent: int = 2,
        length: int = 40,
        n_initial: int = 3,
        n_candidates: int = 200,
        kappa: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.max_trials = max_trials
        self.max_concurrent = max_concurrent
        self.length = length
        self.n_initial = n_initial
        self.n_candidates = n_candidates
        self.kappa = kappa
        self.rng = random.Random(seed)
        self.points: dict[str, list[float]] = {}  # request id -> point in the unit cube
        self.losses: dict[str, float] = {}  # request id -> validation loss
        self.created = 0

    # ------------------------------------------------------------------ proposing points

    def _predict(self, u: list[float]) -> tuple[float, float]:
        """Kernel-weighted mean loss near ``u`` and the distance to the nearest result."""
        weights, total, nearest = 0.0, 0.0, float("inf")
        for rid, loss in self.losses.items():
            d2 = sum((a - b) ** 2 for a, b in zip(u, self.points[rid], strict=True))
            w = math.exp(-d2 / (2 * 0.15**2))
            weights += w
            total += w * loss
            nearest = min(nearest, math.sqrt(d2))
        mean = total / weights if weights > 1e-12 else sum(self.losses.values()) / len(self.losses)
        return mean, nearest

    def _propose(self) -> list[float]:
        dims = len(SPACE)
        if len(self.losses) < self.n_initial:
            return [self.rng.random() for _ in range(dims)]
        scale = max(self.losses.values()) - min(self.losses.values()) or 1.0
        best, best_score = None, float("inf")
        for _ in range(self.n_candidates):
            u = [self.rng.random() for _ in range(dims)]
            mean, nearest = self._predict(u)
            score = mean - self.kappa * scale * nearest  # lower confidence bound
            if score < best_score:
                best, best_score = u, score
        assert best is not None
        return best

    def _create(self) -> searcher.Create:
        u = self._propose()
        hparams = {
            name: _from_unit(x, low, high, log)
            for (name, (low, high, log)), x in zip(SPACE.items(), u, strict=True)
        }
        request_id = uuid.uuid4()
        self.points[str(request_id)] = u
        self.created += 1
        return searcher.Create(request_id=request_id, hparams=hparams, checkpoint=None)

    # ------------------------------------------------------------------ events

    def initial_operations(
        self, searcher_state: searcher.SearcherState
    ) -> list[searcher.Operation]:
        return [self._create() for _ in range(min(self.max_concurrent, self.max_trials))]

    def on_trial_created(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        return [searcher.ValidateAfter(request_id=request_id, length=self.length)]

    def on_validation_completed(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        metric: Any,
        train_length: int,
    ) -> list[searcher.Operation]:
        self.losses[str(request_id)] = float(metric)
        return [searcher.Close(request_id=request_id)]

    def on_trial_closed(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        if self.created < self.max_trials:
            return [self._create()]
        if len(searcher_state.trials_closed) >= self.max_trials:
            return [searcher.Shutdown()]
        return []

    def on_trial_exited_early(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        exited_reason: searcher.ExitedReason,
    ) -> list[searcher.Operation]:
        if exited_reason == searcher.ExitedReason.USER_CANCELED:
            return [searcher.Shutdown(cancel=True)]
        if len(searcher_state.failures) > self.max_trials // 2:
            return [searcher.Shutdown(failure=True)]
        return []  # on_trial_closed follows and starts a replacement

    def progress(self, searcher_state: searcher.SearcherState) -> float:
        return len(searcher_state.trials_closed) / self.max_trials

    # ------------------------------------------------------------------ state

    def best(self) -> tuple[dict[str, float], float] | None:
        """The best hyperparameters found so far and their loss."""
        if not self.losses:
            return None
        rid = min(self.losses, key=self.losses.__getitem__)
        u = self.points[rid]
        hparams = {n: _from_unit(x, *spec) for (n, spec), x in zip(SPACE.items(), u, strict=True)}
        return hparams, self.losses[rid]

    def save_method_state(self, path: pathlib.Path) -> None:
        state = {
            "rng": self.rng.getstate(),
            "points": self.points,
            "losses": self.losses,
            "created": self.created,
        }
        (path / "bayesian.json").write_text(json.dumps(state))

    def load_method_state(self, path: pathlib.Path) -> None:
        state = json.loads((path / "bayesian.json").read_text())
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.points = state["points"]
        self.losses = state["losses"]
        self.created = state["created"]
