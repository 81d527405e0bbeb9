"""A simulated master for search-method tests: carries out operations in a seeded random order,
reports metrics, injects early exits, and checks invariants on every operation it receives."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from determined.master.searcher import (
    Close,
    Create,
    ExitedReason,
    SearcherBase,
    Shutdown,
    ValidateAfter,
    make_search_method,
    operation_to_dict,
    restore_search_method,
)

MetricFn = Callable[[random.Random, dict[str, Any], int], float]


def random_metric(rng: random.Random, hparams: dict[str, Any], length: int) -> float:
    return round(rng.random(), 3)  # coarse values so ties happen


@dataclass
class Run:
    """The trace of one simulated search."""

    trace: list[dict[str, Any]] = field(default_factory=list)
    creates: list[Create] = field(default_factory=list)
    lengths: dict[str, list[int]] = field(default_factory=dict)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    exits: dict[str, ExitedReason] = field(default_factory=dict)
    shutdown: Shutdown | None = None
    progress: list[float] = field(default_factory=list)


class Driver:
    """Drives one search to its Shutdown. ``exit_rate`` is the chance, per step, that a live
    trial ends early with a random reason; ``restart_at`` snapshots, JSON round-trips and
    restores the method at that step (a master restart)."""

    def __init__(
        self,
        searcher_config: Mapping[str, Any],
        hparams: Mapping[str, Any] | None,
        seed: int,
        *,
        order_seed: int = 0,
        exit_rate: float = 0.0,
        reasons: tuple[ExitedReason, ...] = tuple(ExitedReason),
        metric: MetricFn = random_metric,
        restart_at: int | None = None,
        max_steps: int = 20_000,
        on_op: Callable[[Driver, Any], None] | None = None,
    ) -> None:
        self.config = searcher_config
        self.hparams = hparams
        self.method: SearcherBase = make_search_method(searcher_config, hparams, seed)
        self.method.strict = True
        self.rng = random.Random(order_seed)
        self.exit_rate = exit_rate
        self.reasons = reasons
        self.metric = metric
        self.restart_at = restart_at
        self.max_steps = max_steps
        self.on_op = on_op
        self.run = Run()
        self.queues: dict[str, list[Any]] = {}
        self.hp_of: dict[str, dict[str, Any]] = {}
        self.ended: set[str] = set()  # closed or exited: the master considers the trial gone
        self.trained: dict[str, int] = {}
        self.created: set[str] = set()
        self.sent: dict[str, list[int]] = {}

    def _accept(self, ops: list[Any]) -> None:
        for op in ops:
            self.run.trace.append(operation_to_dict(op))
            if self.on_op is not None:
                self.on_op(self, op)
            if isinstance(op, Shutdown):
                assert self.run.shutdown is None, "two Shutdowns"
                self.run.shutdown = op
                continue
            assert self.run.shutdown is None, f"{op} after Shutdown"
            if isinstance(op, Create):
                assert op.request_id not in self.hp_of, "request id reused"
                assert 0 <= op.trial_seed < 2**31
                self.run.creates.append(op)
                self.hp_of[op.request_id] = op.hparams
                self.run.lengths[op.request_id] = []
                self.run.metrics[op.request_id] = []
                self.queues[op.request_id] = [op]
                continue
            assert op.request_id not in self.ended, f"{op} for a trial that already ended"
            if isinstance(op, ValidateAfter):
                self.sent.setdefault(op.request_id, []).append(op.length)
            self.queues[op.request_id].append(op)

    def _live(self) -> list[str]:
        return [r for r in self.hp_of if r not in self.ended and r in self.created]

    def _step(self) -> None:
        live = self._live()
        if live and self.rng.random() < self.exit_rate:
            rid = self.rng.choice(live)
            reason = self.rng.choice(self.reasons)
            self.run.exits[rid] = reason
            self.ended.add(rid)
            self.queues.pop(rid, None)
            self._accept(self.method.on_trial_exited_early(rid, reason))
            self._accept(self.method.on_trial_closed(rid))
            return
        ready = [r for r, q in self.queues.items() if q]
        assert ready, "stalled: no work, no Shutdown"
        rid = self.rng.choice(ready)
        op = self.queues[rid].pop(0)
        if isinstance(op, Create):
            self.created.add(rid)
            self._accept(self.method.on_trial_created(rid))
        elif isinstance(op, ValidateAfter) and self.method.every_validation:
            self._report_each_rung(rid, op.length)
        elif isinstance(op, ValidateAfter):
            assert op.length >= self.trained.get(rid, 0), "lengths must not go backwards"
            self.trained[rid] = op.length
            value = self.metric(self.rng, self.hp_of[rid], op.length)
            self.run.lengths[rid].append(op.length)
            self.run.metrics[rid].append(value)
            self._accept(self.method.on_validation_completed(rid, value, op.length))
        elif isinstance(op, Close):
            self.ended.add(rid)
            del self.queues[rid]
            self._accept(self.method.on_trial_closed(rid))

    def _report_each_rung(self, rid: str, length: int) -> None:
        # 0.38 style: validations at every rung length until the searcher stops the trial.
        steps = sorted({x for lengths in self.method.rung_lengths for x in lengths if x <= length})
        for step in steps:
            self.trained[rid] = step
            value = self.metric(self.rng, self.hp_of[rid], step)
            self.run.lengths[rid].append(step)
            self.run.metrics[rid].append(value)
            self._accept(self.method.on_validation_completed(rid, value, step))
            if any(isinstance(op, Close) for op in self.queues.get(rid, [])):
                return
        self.queues[rid].append(Close(rid))

    def drive(self) -> Run:
        self._accept(self.method.initial_operations())
        for step in range(self.max_steps):
            if self.run.shutdown is not None:
                return self.run
            if step == self.restart_at:
                snap = json.loads(json.dumps(self.method.snapshot(), allow_nan=False))
                self.method = restore_search_method(self.config, self.hparams, snap)
                self.method.strict = True
            self._step()
            self.run.progress.append(self.method.progress(self.trained))
        raise AssertionError("search did not finish")
