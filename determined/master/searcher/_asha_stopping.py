"""Stop-based ASHA: ``stop_once: true`` (0.37) and the 0.38 ``time_metric`` variant.

A trial's result at a rung is compared with the results already there: in the top
``max(floor(n/d), 1)`` it continues, otherwise it is closed for good (no waiting, no resuming).
Whenever a trial stops, a new one starts while fewer than ``max_trials`` were created.
"""

from __future__ import annotations

from typing import Any

from determined.master.searcher._asha import AshaCoreBase
from determined.master.searcher._method_core import SearchContext
from determined.master.searcher._operations import Close, ExitedReason, Operation, ValidateAfter
from determined.master.searcher._rungs import EXITED_METRIC, TrialMetric


class AshaStoppingCore(AshaCoreBase):
    """0.37 ``stop_once: true``: decisions at op completions, one rung at a time."""

    def validated(
        self, ctx: SearchContext, request_id: str, metric: Any, length: int
    ) -> list[Operation]:
        self.pending.pop(request_id, None)
        ctx.sampler.report(request_id, length, float(metric))
        return self._decide(ctx, request_id, self._signed(metric), float(metric))

    def exited_early(
        self, ctx: SearchContext, request_id: str, reason: ExitedReason
    ) -> list[Operation]:
        was_pending = self.pending.pop(request_id, None)
        if reason.is_invalid_hp:
            return self._drop_invalid(ctx, request_id)
        self.early_exit[request_id] = True
        self.closed_trials[request_id] = True
        ctx.sampler.fail(request_id)
        if not was_pending:
            return []  # its result at this rung is already in
        return self._decide(ctx, request_id, EXITED_METRIC, None)

    def _decide(
        self, ctx: SearchContext, request_id: str, metric: float, raw: float | None
    ) -> list[Operation]:
        r = self.trial_rungs[request_id]
        rung = self.rungs[r]
        rung.outstanding -= 1
        live = not self.early_exit.get(request_id)
        ops: list[Operation] = []
        continues = False
        if r == self.num_rungs - 1:
            rung.metrics.append(TrialMetric(request_id, metric))
            if live:
                ops.append(Close(request_id))
                self.closed_trials[request_id] = True
                ctx.sampler.finish(request_id, raw if raw is not None else metric)
        else:
            keep = max(int((len(rung.metrics) + 1) / self.divisor), 1)
            idx = rung.insert(request_id, metric, ties_first=True)
            rung.metrics[idx].promoted = idx < keep
            if live and idx < keep:
                self.trial_rungs[request_id] = r + 1
                self.rungs[r + 1].outstanding += 1
                self.pending[request_id] = True
                ops.append(ValidateAfter(request_id, self.targets[r + 1]))
                continues = True
            elif live:
                ops.append(Close(request_id))
                self.closed_trials[request_id] = True
                ctx.sampler.prune(request_id)
        if not continues and self._may_create():
            ops += self._new_trial(ctx)
        return ops


class AshaTimeCore(AshaCoreBase):
    """0.38 ``time_metric``/``max_time``: every validation is judged; rung targets are time
    steps, one report may pass several rungs, and a stop is a ``Close`` the master delivers to
    the running trial as a preemption signal."""

    every_validation = True

    def _new_trial(self, ctx: SearchContext) -> list[Operation]:
        create = ctx.create()
        self.trial_rungs[create.request_id] = 0
        self.pending[create.request_id] = True
        return [create, ValidateAfter(create.request_id, self.targets[-1])]

    def validated(
        self, ctx: SearchContext, request_id: str, metric: Any, length: int
    ) -> list[Operation]:
        if self.closed_trials.get(request_id):
            return []  # already told to stop; late reports change nothing
        ctx.sampler.report(request_id, length, float(metric))
        signed = self._signed(metric)
        for r in range(self.trial_rungs[request_id], self.num_rungs):
            self.trial_rungs[request_id] = r
            if length < self.targets[r]:
                return []
            idx = self.rungs[r].insert(request_id, signed, ties_first=True)
            if r == self.num_rungs - 1:
                ctx.sampler.finish(request_id, float(metric))
                return self._stop(ctx, request_id)
            if idx >= max(int(len(self.rungs[r].metrics) / self.divisor), 1):
                ctx.sampler.prune(request_id)
                return self._stop(ctx, request_id)
        return []

    def _stop(self, ctx: SearchContext, request_id: str) -> list[Operation]:
        self.closed_trials[request_id] = True
        self.pending.pop(request_id, None)
        ops: list[Operation] = [Close(request_id)]
        if self._may_create():
            ops += self._new_trial(ctx)
        return ops

    def exited_early(
        self, ctx: SearchContext, request_id: str, reason: ExitedReason
    ) -> list[Operation]:
        was_running = self.pending.pop(request_id, None)
        if reason.is_invalid_hp:
            return self._drop_invalid(ctx, request_id)
        self.early_exit[request_id] = True
        if not was_running:
            return []
        self.closed_trials[request_id] = True
        ctx.sampler.fail(request_id)
        self.rungs[self.trial_rungs[request_id]].insert(request_id, EXITED_METRIC, ties_first=True)
        return self._new_trial(ctx) if self._may_create() else []
