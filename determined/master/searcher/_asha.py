"""Asynchronous successive halving (``async_halving``), promotion-based (``stop_once: false``).

Every trial trains to rung 0. Whenever a rung has seen ``n`` results, its best ``floor(n/d)`` are
promoted to train on to the next rung; a waiting trial is resumed from its checkpoint when it is
promoted. Once rung 0 holds ``max_trials`` results, rungs with nothing outstanding are closed out
from the bottom. Metrics are ranked lower-is-better (negated when ``smaller_is_better`` is false).
"""

from __future__ import annotations

from typing import Any

from determined.master.searcher._method_core import MethodCore, SearchContext
from determined.master.searcher._operations import Close, ExitedReason, Operation, ValidateAfter
from determined.master.searcher._rungs import EXITED_METRIC, Rung, TrialMetric, rung_targets


class AshaCoreBase(MethodCore):
    """State shared by the promotion and stop-once variants (one bracket)."""

    needs_numeric_metric = True

    def __init__(
        self,
        *,
        max_length: int,
        max_trials: int,
        num_rungs: int,
        divisor: float,
        max_concurrent_trials: int,
        smaller_is_better: bool,
    ) -> None:
        self.max_trials = max_trials
        self.num_rungs = num_rungs
        self.divisor = divisor
        self.mct = max_concurrent_trials
        self.smaller_is_better = smaller_is_better
        self.targets = rung_targets(max_length, divisor, num_rungs)
        self.rungs = [Rung() for _ in range(num_rungs)]
        self.trial_rungs: dict[str, int] = {}
        self.early_exit: dict[str, bool] = {}
        self.closed_trials: dict[str, bool] = {}
        # Trials with a ValidateAfter not yet reported; an exit of a trial that is waiting at a
        # rung adds no metric (the reference adds a second one and can never close out).
        self.pending: dict[str, bool] = {}
        self.trials_completed = 0
        self.invalid_trials = 0

    def _new_trial(self, ctx: SearchContext) -> list[Operation]:
        create = ctx.create()
        self.trial_rungs[create.request_id] = 0
        self.pending[create.request_id] = True
        return [create, ValidateAfter(create.request_id, self.targets[0])]

    def _may_create(self) -> bool:
        return len(self.trial_rungs) - self.invalid_trials < self.max_trials

    def initial(self, ctx: SearchContext) -> list[Operation]:
        if self.mct > 0:
            n = min(self.mct, self.max_trials)
        else:
            n = max(min(int(self.divisor ** (self.num_rungs - 1)), self.max_trials), 1)
        return [op for _ in range(n) for op in self._new_trial(ctx)]

    def created(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        self.rungs[0].outstanding += 1
        self.trial_rungs[request_id] = 0
        return []

    def closed(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        self.trials_completed += 1
        self.closed_trials[request_id] = True
        return []

    def _signed(self, metric: Any) -> float:
        value = float(metric)
        return value if self.smaller_is_better else -value

    def _drop_invalid(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        """Forget an invalid-hyperparameter trial and start a replacement. (The reference also
        sends the exiting trial a Close; it has already exited, so we send nothing.)"""
        self.early_exit[request_id] = True
        self.closed_trials[request_id] = True
        self.invalid_trials += 1
        for rung in self.rungs[: self.trial_rungs[request_id] + 1]:
            rung.remove(request_id)
        ctx.sampler.fail(request_id)
        return self._new_trial(ctx)

    def rung_lengths(self) -> list[list[int]]:
        return [list(self.targets)]

    def progress(self, trial_progress: dict[str, float], closed: set[str]) -> float:
        seen = len(self.rungs[0].metrics)
        value = seen / (1.2 * self.max_trials)
        if seen == self.max_trials:
            valid = self.trials_completed - self.invalid_trials
            value = max(valid / self.max_trials, value)
        return value

    def state(self) -> dict[str, Any]:
        return {
            "rungs": [r.to_json() for r in self.rungs],
            "trial_rungs": self.trial_rungs,
            "early_exit": list(self.early_exit),
            "closed": list(self.closed_trials),
            "pending": list(self.pending),
            "trials_completed": self.trials_completed,
            "invalid_trials": self.invalid_trials,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.rungs = [Rung.from_json(r) for r in state["rungs"]]
        self.trial_rungs = {k: int(v) for k, v in state["trial_rungs"].items()}
        self.early_exit = dict.fromkeys(state["early_exit"], True)
        self.closed_trials = dict.fromkeys(state["closed"], True)
        self.pending = dict.fromkeys(state["pending"], True)
        self.trials_completed = int(state["trials_completed"])
        self.invalid_trials = int(state["invalid_trials"])


class AshaPromotionCore(AshaCoreBase):
    """``stop_once: false``: promotions, waiting trials, close-out."""

    def validated(
        self, ctx: SearchContext, request_id: str, metric: Any, length: int
    ) -> list[Operation]:
        self.pending.pop(request_id, None)
        return self._promote(ctx, request_id, self._signed(metric))

    def exited_early(
        self, ctx: SearchContext, request_id: str, reason: ExitedReason
    ) -> list[Operation]:
        if reason.is_invalid_hp:
            if self.pending.pop(request_id, None):
                self.rungs[self.trial_rungs[request_id]].outstanding -= 1
            return self._drop_invalid(ctx, request_id)
        self.early_exit[request_id] = True
        self.closed_trials[request_id] = True
        if not self.pending.pop(request_id, None):
            return []  # waiting at a rung: its result is in; a later promotion scores it worst
        return self._promote(ctx, request_id, EXITED_METRIC)

    def _rung_promotions(self, rung: Rung, request_id: str, metric: float) -> str | None:
        n = len(rung.metrics)
        old_quota = int(n / self.divisor)
        new_quota = int((n + 1) / self.divisor)
        idx = rung.insert(request_id, metric, ties_first=False)
        if idx < new_quota:
            rung.metrics[idx].promoted = True
            return request_id
        if new_quota != old_quota and not rung.metrics[old_quota].promoted:
            rung.metrics[old_quota].promoted = True
            return rung.metrics[old_quota].request_id
        return None

    def _promote(self, ctx: SearchContext, request_id: str, metric: float) -> list[Operation]:
        r = self.trial_rungs[request_id]
        rung = self.rungs[r]
        rung.outstanding -= 1
        added_work = False
        ops: list[Operation] = []
        if r == self.num_rungs - 1:
            rung.metrics.append(TrialMetric(request_id, metric))
            if not self.closed_trials.get(request_id):
                ops.append(Close(request_id))
                self.closed_trials[request_id] = True
        else:
            promoted = self._rung_promotions(rung, request_id, metric)
            if promoted is not None:
                self.trial_rungs[promoted] = r + 1
                self.rungs[r + 1].outstanding += 1
                if self.closed_trials.get(promoted):
                    # An exited (or already closed-out) trial cannot resume: score it as if it
                    # ran the next rung and came out worst. The reference resumes closed ones.
                    return self._promote(ctx, promoted, EXITED_METRIC)
                ops.append(ValidateAfter(promoted, self.targets[r + 1]))
                self.pending[promoted] = True
                added_work = True
        if not added_work and self._may_create():
            ops += self._new_trial(ctx)
        if len(self.rungs[0].metrics) == self.max_trials:
            ops += self._close_out()
        return ops

    def _close_out(self) -> list[Operation]:
        ops: list[Operation] = []
        for rung in self.rungs:
            if rung.outstanding > 0:
                break
            for tm in rung.metrics:
                rid = tm.request_id
                if not tm.promoted and not self.closed_trials.get(rid):
                    if not self.early_exit.get(rid):
                        ops.append(Close(rid))
                    self.closed_trials[rid] = True
        return ops
