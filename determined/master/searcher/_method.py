"""``SearchMethod``, what the master drives, and ``SearcherBase``, the bookkeeping every search
method shares around its method core.

``SearcherBase`` counts Creates issued and trials closed, failed and canceled, emits
``Shutdown`` once every requested trial is closed, accepts each event once, checks that a
completed operation is one it asked for, and snapshots everything (RNG included) as JSON.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, Protocol

from determined.errors import InternalException, InvalidSearcherMetric, SearcherEventRejected
from determined.master.searcher import _hparams
from determined.master.searcher._method_core import MethodCore, Sampler, SearchContext
from determined.master.searcher._nprand import NpRand
from determined.master.searcher._operations import (
    Create,
    ExitedReason,
    Operation,
    Shutdown,
    ValidateAfter,
)

SNAPSHOT_VERSION = 1


class SearchMethod(Protocol):
    """Everything the master uses on a search method. Every event returns the operations to
    carry out, in order.

    Calls come from one thread at a time (the experiment's). Events name trials by the
    ``request_id`` of their ``Create``; each event is accepted once (see :class:`SearcherBase`).
    The master persists :meth:`snapshot` in the transaction of each event; the searcher
    factory's ``restore_search_method`` rebuilds the method from the config and a snapshot.
    """

    def initial_operations(self) -> list[Operation]: ...

    def on_trial_created(self, request_id: str) -> list[Operation]: ...

    def on_validation_completed(
        self, request_id: str, metric: Any, length: int
    ) -> list[Operation]: ...

    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]: ...

    def on_trial_closed(self, request_id: str) -> list[Operation]: ...

    def reopen(self, request_id: str, length: int) -> None: ...

    def progress(self, trial_progress: Mapping[str, float]) -> float: ...

    def snapshot(self) -> dict[str, Any]: ...

    @property
    def every_validation(self) -> bool: ...

    @property
    def trials_decide_length(self) -> bool: ...

    @property
    def rung_lengths(self) -> list[list[int]]: ...


class SearcherBase:
    """A complete search method (implements :class:`SearchMethod`) built from a core.

    The master calls the ``on_*`` methods from the experiment's single thread, in the order
    events happen, and carries out the returned operations in order. After each call it may
    persist :meth:`snapshot`; ``restore_search_method`` continues the same search exactly.

    Raises (from the ``on_*`` methods, with no state changed):
        SearcherEventRejected: an event for an unknown trial, or an operation completed twice
            or with a length the searcher never asked for.
        InvalidSearcherMetric: a non-numeric metric for a method that ranks trials.
    """

    #: strict mode raises on operations for closed trials instead of dropping them (tests)
    strict = False

    def __init__(
        self,
        core: MethodCore,
        hparams: Mapping[str, Any] | _hparams.HyperparameterSpace | None,
        seed: int,
        *,
        kind: str,
        sampler: Sampler | None = None,
    ) -> None:
        space = _space(hparams)
        self.kind = kind
        self.experiment_seed = int(seed) & 0xFFFFFFFF
        self._core = core
        self._ctx = SearchContext(NpRand(self.experiment_seed), space, sampler or Sampler())
        self._started = False
        self._shutdown = False
        self._requested: dict[str, bool] = {}  # request ids of every Create, in order
        self._created: dict[str, bool] = {}
        self._closed: dict[str, bool] = {}
        self._exits: dict[str, str] = {}  # request id -> ExitedReason value
        self._outstanding: dict[str, list[int]] = {}  # ValidateAfter lengths not yet reported
        self._completed: dict[str, bool] = {}  # "request_id:length"

    @property
    def every_validation(self) -> bool:
        """True for 0.38-style ``time_metric`` searches: forward every validation of a trial to
        :meth:`on_validation_completed` (``length`` = the time metric's value)."""
        return self._core.every_validation

    @property
    def trials_decide_length(self) -> bool:
        """True for 0.38-style single/random/grid without ``max_length``: a new trial gets
        ``Create`` and ``Close`` but no ``ValidateAfter``, so the master must run it anyway
        (it has work until its process exits 0 of its own accord)."""
        return self._core.trials_decide_length

    # ----------------------------------------------------------------------------- events

    def initial_operations(self) -> list[Operation]:
        """The first trials to create. Call exactly once, when the experiment starts."""
        if self._started:
            raise SearcherEventRejected("initial_operations() was already called for this search")
        self._started = True
        return self._record(self._core.initial(self._ctx))

    def on_trial_created(self, request_id: str) -> list[Operation]:
        """The trial asked for by ``Create(request_id)`` now exists."""
        if request_id not in self._requested:
            raise SearcherEventRejected(f"no Create was issued with request id {request_id}")
        if request_id in self._created:
            return []
        self._created[request_id] = True
        return self._record(self._core.created(self._ctx, request_id))

    def on_validation_completed(self, request_id: str, metric: Any, length: int) -> list[Operation]:
        """The trial finished ``ValidateAfter(length)`` with searcher metric ``metric``."""
        self._check_live(request_id)
        if self._core.needs_numeric_metric and not _is_number(metric):
            raise InvalidSearcherMetric(
                f"trial {request_id} reported searcher metric {metric!r}, but this searcher "
                "ranks trials by it, so it must be a number; report a float for the metric "
                "named in searcher.metric"
            )
        if self._core.every_validation:
            if request_id in self._closed or request_id in self._exits:
                return []
            return self._record(self._core.validated(self._ctx, request_id, metric, int(length)))
        key = f"{request_id}:{int(length)}"
        if key in self._completed:
            raise SearcherEventRejected(
                f"operation ValidateAfter({request_id}, {length}) was already completed"
            )
        pending = self._outstanding.get(request_id) or []
        if not pending or pending[0] != int(length):
            raise SearcherEventRejected(
                f"trial {request_id} has no outstanding ValidateAfter with length {length} "
                f"(outstanding: {pending})"
            )
        ops = self._core.validated(self._ctx, request_id, metric, int(length))
        pending.pop(0)
        self._completed[key] = True
        return self._record(ops)

    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        """The trial stopped before its work was done. Reported once; repeats are ignored."""
        reason = ExitedReason(reason)
        self._check_created(request_id)
        if request_id in self._exits or request_id in self._closed:
            return []
        ops = self._core.exited_early(self._ctx, request_id, reason)
        self._exits[request_id] = reason.value
        self._outstanding.pop(request_id, None)
        ops = self._record(ops)
        if len(self._requested) == len(self._closed):
            ops += self._record(
                [Shutdown(failure=self._count(ExitedReason.ERRORED) >= len(self._requested))]
            )
        return ops

    def on_trial_closed(self, request_id: str) -> list[Operation]:
        """The trial's process ended and it will never run again. Repeats are ignored."""
        self._check_created(request_id)
        if request_id in self._closed:
            return []
        self._closed[request_id] = True
        self._outstanding.pop(request_id, None)
        ops = self._record(self._core.closed(self._ctx, request_id))
        if len(self._requested) == len(self._closed):
            total = len(self._requested)
            ops += self._record(
                [
                    Shutdown(
                        cancel=self._count(ExitedReason.USER_CANCELED) >= total,
                        failure=self._count(ExitedReason.ERRORED) >= total,
                    )
                ]
            )
        return ops

    def reopen(self, request_id: str, length: int) -> None:
        """Make the ended trial ``request_id`` live again, owing ``ValidateAfter(length)``: not
        closed, not exited, the search not shut down, and that length no longer completed
        (``det e continue`` of a single-trial experiment). The master issues the operation
        itself; no event follows from this call."""
        self._check_created(request_id)
        self._shutdown = False
        self._closed.pop(request_id, None)
        self._exits.pop(request_id, None)
        self._outstanding[request_id] = [int(length)]
        self._completed.pop(f"{request_id}:{int(length)}", None)

    # ----------------------------------------------------------------------------- queries

    def progress(self, trial_progress: Mapping[str, float]) -> float:
        """Search progress in ``[0, 1]``. ``trial_progress`` maps request ids to the length each
        trial has trained so far (searcher units); missing trials count as 0."""
        invalid = {r for r, why in self._exits.items() if ExitedReason(why).is_invalid_hp}
        per_trial = {
            r: float(trial_progress.get(r, 0.0)) for r in self._created if r not in invalid
        }
        value = self._core.progress(per_trial, set(self._closed))
        if math.isnan(value) or math.isinf(value):
            return 0.0
        return min(max(value, 0.0), 1.0)

    @property
    def rung_lengths(self) -> list[list[int]]:
        """Per bracket, the lengths its rungs train to (random/grid: ``[[max_length]]``, or
        ``[[]]`` when trials decide their own length)."""
        return self._core.rung_lengths()

    def bracket_of(self, request_id: str) -> int:
        """The bracket that created the trial (always 0 except for adaptive_asha)."""
        find = getattr(self._core, "bracket_of", None)
        return (find(request_id) or 0) if find else 0

    @property
    def is_shut_down(self) -> bool:
        return self._shutdown

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to continue this search, as JSON-able data."""
        return {
            "version": SNAPSHOT_VERSION,
            "kind": self.kind,
            "experiment_seed": self.experiment_seed,
            "rand": self._ctx.rand.state(),
            "started": self._started,
            "shutdown": self._shutdown,
            "requested": list(self._requested),
            "created": list(self._created),
            "closed": list(self._closed),
            "exits": dict(self._exits),
            "outstanding": {k: list(v) for k, v in self._outstanding.items()},
            "completed": list(self._completed),
            "core": self._core.state(),
            "sampler": self._ctx.sampler.state(),
        }

    def load_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        """Replace this search's state with ``snapshot`` (same config and kind)."""
        if snapshot.get("version") != SNAPSHOT_VERSION or snapshot.get("kind") != self.kind:
            raise SearcherEventRejected(
                f"snapshot is version {snapshot.get('version')} of a {snapshot.get('kind')!r} "
                f"search; this is version {SNAPSHOT_VERSION} of a {self.kind!r} search"
            )
        self._ctx.rand = NpRand.from_state(snapshot["rand"])
        self._started = bool(snapshot["started"])
        self._shutdown = bool(snapshot["shutdown"])
        self._requested = dict.fromkeys(snapshot["requested"], True)
        self._created = dict.fromkeys(snapshot["created"], True)
        self._closed = dict.fromkeys(snapshot["closed"], True)
        self._exits = dict(snapshot["exits"])
        self._outstanding = {k: [int(x) for x in v] for k, v in snapshot["outstanding"].items()}
        self._completed = dict.fromkeys(snapshot["completed"], True)
        self._core.load_state(snapshot["core"])
        self._ctx.sampler.load_state(snapshot["sampler"])

    # ----------------------------------------------------------------------------- helpers

    def _count(self, reason: ExitedReason) -> int:
        return sum(1 for why in self._exits.values() if why == reason.value)

    def _check_created(self, request_id: str) -> None:
        if request_id not in self._created:
            raise SearcherEventRejected(
                f"trial {request_id} is unknown to this search (never created)"
            )

    def _check_live(self, request_id: str) -> None:
        self._check_created(request_id)
        if not self._core.every_validation and (
            request_id in self._closed or request_id in self._exits
        ):
            raise SearcherEventRejected(f"trial {request_id} already ended; its ops are void")

    def _record(self, ops: list[Operation]) -> list[Operation]:
        kept: list[Operation] = []
        for op in ops:
            if isinstance(op, Shutdown):
                if self._shutdown:
                    continue
                self._shutdown = True
            elif isinstance(op, Create):
                self._requested[op.request_id] = True
                self._outstanding[op.request_id] = []
            elif op.request_id in self._closed or op.request_id in self._exits:
                if self.strict:
                    raise InternalException(f"{op} issued for closed trial {op.request_id}")
                continue
            elif isinstance(op, ValidateAfter) and not self._core.every_validation:
                self._outstanding.setdefault(op.request_id, []).append(op.length)
            kept.append(op)
        return kept


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _space(hparams: Any) -> _hparams.HyperparameterSpace:
    hp_types = (
        _hparams.Const,
        _hparams.Int,
        _hparams.Double,
        _hparams.Log,
        _hparams.Categorical,
        _hparams.Nested,
    )
    if (
        isinstance(hparams, dict)
        and hparams
        and all(isinstance(v, hp_types) for v in hparams.values())
    ):
        return hparams
    return _hparams.parse_hyperparameters(hparams)
