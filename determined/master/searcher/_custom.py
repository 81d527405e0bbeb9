"""``searcher: {name: custom}``: the search runs outside the master (``determined.searcher``'s
``LocalSearchRunner`` or ``RemoteSearchRunner``), as in Determined 0.37.

The method only queues what happened to its trials as v1 ``SearcherEvent`` JSON, each with the
next id; the runner reads the queue (``GET .../searcher_events``), decides, and posts
operations naming the event they answer (``POST .../searcher_operations``). That
acknowledgement drops the event and every earlier one. The queue is part of :meth:`snapshot`,
so it is committed with the event that filled it and survives a master restart.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

from determined.errors import SearcherEventRejected
from determined.master.searcher._operations import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Shutdown,
    ValidateAfter,
)

SNAPSHOT_VERSION = 1
KIND = "custom"
MAX_LENGTH = 2**62  # lengths are stored as 64-bit integers

# 0.37's v1TrialExitedEarlyExitedReason for each of our reasons (a user cancel is
# USER_REQUESTED_STOP: the reference's runner rejects USER_CANCELED)
EXITED_REASONS = {
    ExitedReason.ERRORED: "EXITED_REASON_UNSPECIFIED",
    ExitedReason.USER_CANCELED: "EXITED_REASON_USER_REQUESTED_STOP",
    ExitedReason.INVALID_HP: "EXITED_REASON_INVALID_HP",
    ExitedReason.INIT_INVALID_HP: "EXITED_REASON_INVALID_HP",
}


class EventQueue:
    """Unacknowledged events in order; ids increase by one from 1 and are never reused."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.count = 0  # the id of the newest event ever queued

    def push(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Queue ``body`` (one ``SearcherEvent`` member) under the next id; return the event."""
        self.count += 1
        event = {"id": self.count, **body}
        self.events.append(event)
        return event

    def ack(self, event_id: int) -> None:
        """Drop every event up to and including ``event_id``.

        Raises:
            SearcherEventRejected: ``event_id`` is not in the queue (never issued, or already
                acknowledged: its operations were carried out then).
        """
        first = self.count - len(self.events) + 1
        if not self.events or not first <= event_id <= self.count:
            pending = f"{first}..{self.count}" if self.events else "none"
            raise SearcherEventRejected(
                f"searcher event {event_id} is not pending (pending ids: {pending}); answer "
                "only events that GET .../searcher_events returned, each once"
            )
        del self.events[: event_id - first + 1]

    def state(self) -> dict[str, Any]:
        return {"events": [dict(e) for e in self.events], "count": self.count}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> EventQueue:
        queue = cls()
        queue.events = [dict(e) for e in state["events"]]
        queue.count = int(state["count"])
        return queue


class CustomSearch:
    """The master's side of a custom search (implements ``SearchMethod``): every event only
    queues a searcher event and returns no operations; :meth:`apply_operations` turns a
    runner's posted operations into ours."""

    kind = KIND

    def __init__(self, seed: int = 0) -> None:
        self.experiment_seed = int(seed) & 0xFFFFFFFF
        self.queue = EventQueue()
        self._progress = 0.0
        self._started = False
        self._shutdown = False
        self._requested: dict[str, bool] = {}
        self._ended: dict[str, bool] = {}  # closed or exited early: operations for it are void

    # ----------------------------------------------------------------------------- events

    def initial_operations(self) -> list[Operation]:
        if self._started:
            raise SearcherEventRejected("initial_operations() was already called for this search")
        self._started = True
        self.queue.push({"initialOperations": {}})
        return []

    def on_trial_created(self, request_id: str) -> list[Operation]:
        self.queue.push({"trialCreated": {"requestId": request_id}})
        return []

    def on_validation_completed(self, request_id: str, metric: Any, length: int) -> list[Operation]:
        self.queue.push(
            {
                "validationCompleted": {
                    "requestId": request_id,
                    "metric": _json_metric(metric),
                    "validateAfterLength": str(int(length)),
                }
            }
        )
        return []

    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        if request_id in self._ended:
            return []
        self._ended[request_id] = True
        why = EXITED_REASONS[ExitedReason(reason)]
        self.queue.push({"trialExitedEarly": {"requestId": request_id, "exitedReason": why}})
        return []

    def on_trial_closed(self, request_id: str) -> list[Operation]:
        self._ended[request_id] = True
        self.queue.push({"trialClosed": {"requestId": request_id}})
        return []

    def on_trial_progress(self, request_id: str, units: float) -> None:
        """A trial reported progress (units of its operation); 0.37 forwards it as an event."""
        self.queue.push({"trialProgress": {"requestId": request_id, "partialUnits": float(units)}})

    def reopen(self, request_id: str, length: int) -> None:
        raise SearcherEventRejected(
            "a custom search cannot be continued: run the search runner again with a new "
            "experiment instead"
        )

    # ----------------------------------------------------------------------------- operations

    def apply_operations(
        self, operations: list[Mapping[str, Any]], triggered_by: int | None
    ) -> list[Operation]:
        """Check a runner's posted ``v1SearcherOperation`` list, acknowledge ``triggered_by``
        and return the operations for the master to carry out, in order.

        Raises (with nothing changed):
            SearcherEventRejected: a malformed operation, an unknown or duplicate request id,
                or an event id that is not pending.
        """
        parsed: list[Operation] = []
        progress: float | None = None
        new_ids: dict[str, bool] = {}
        for i, op in enumerate(operations):
            item = _parse_operation(op, i, self._requested, new_ids)
            if isinstance(item, float):
                progress = item
            else:
                parsed.append(item)
        if triggered_by is not None:
            self.queue.ack(int(triggered_by))
        if progress is not None:
            self._progress = progress
        kept: list[Operation] = []
        for item in parsed:
            if isinstance(item, Create):
                self._requested[item.request_id] = True
            elif isinstance(item, Shutdown):
                if self._shutdown:
                    continue
                self._shutdown = True
            elif item.request_id in self._ended:
                continue  # the trial is over; 0.37 drops work for it too
            kept.append(item)
        return kept

    # ----------------------------------------------------------------------------- queries

    def events(self) -> list[dict[str, Any]]:
        """The pending events, oldest first."""
        return [dict(e) for e in self.queue.events]

    def progress(self, trial_progress: Mapping[str, float]) -> float:
        """What the runner last set with ``setSearcherProgress``."""
        return self._progress

    @property
    def every_validation(self) -> bool:
        return False

    @property
    def trials_decide_length(self) -> bool:
        return False

    @property
    def rung_lengths(self) -> list[list[int]]:
        return [[]]

    @property
    def is_shut_down(self) -> bool:
        return self._shutdown

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "kind": KIND,
            "experiment_seed": self.experiment_seed,
            "queue": self.queue.state(),
            "progress": self._progress,
            "started": self._started,
            "shutdown": self._shutdown,
            "requested": list(self._requested),
            "ended": list(self._ended),
        }

    def load_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        if snapshot.get("version") != SNAPSHOT_VERSION or snapshot.get("kind") != KIND:
            raise SearcherEventRejected(
                f"snapshot is version {snapshot.get('version')} of a {snapshot.get('kind')!r} "
                f"search; this is version {SNAPSHOT_VERSION} of a {KIND!r} search"
            )
        self.queue = EventQueue.from_state(snapshot["queue"])
        self._progress = float(snapshot["progress"])
        self._started = bool(snapshot["started"])
        self._shutdown = bool(snapshot["shutdown"])
        self._requested = dict.fromkeys(snapshot["requested"], True)
        self._ended = dict.fromkeys(snapshot["ended"], True)


def _json_metric(metric: Any) -> Any:
    """The metric as strict JSON (non-finite floats as the harness's strings)."""
    if isinstance(metric, float) and not math.isfinite(metric):
        return "NaN" if math.isnan(metric) else ("Infinity" if metric > 0 else "-Infinity")
    try:
        json.dumps(metric, allow_nan=False)
    except (TypeError, ValueError):
        return str(metric)
    return metric


def _request_id(value: Any, where: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError):
        raise SearcherEventRejected(
            f"{where}.requestId must be a UUID string (the request id of a createTrial), "
            f"got {value!r}"
        ) from None


def _known(rid: str, where: str, requested: Mapping[str, bool], new: Mapping[str, bool]) -> str:
    if rid not in requested and rid not in new:
        raise SearcherEventRejected(
            f"{where}.requestId {rid} names no trial of this search; create it first with "
            "createTrial"
        )
    return rid


def _parse_operation(
    op: Mapping[str, Any], i: int, requested: Mapping[str, bool], new: dict[str, bool]
) -> Operation | float:
    """One ``v1SearcherOperation``; a ``setSearcherProgress`` comes back as its float."""
    where = f"searcherOperations[{i}]"
    if not isinstance(op, Mapping):
        raise SearcherEventRejected(f"{where} must be an object, got {op!r}")
    members = [k for k, v in op.items() if v is not None]
    known = ("createTrial", "trialOperation", "closeTrial", "shutDown", "setSearcherProgress")
    if len(members) != 1 or members[0] not in known:
        raise SearcherEventRejected(
            f"{where} must set exactly one of {', '.join(known)}, got {sorted(members)}"
        )
    kind = members[0]
    body = op[kind]
    if not isinstance(body, Mapping):
        raise SearcherEventRejected(f"{where}.{kind} must be an object")
    if kind == "createTrial":
        rid = _request_id(body.get("requestId"), f"{where}.createTrial")
        if rid in requested or rid in new:
            raise SearcherEventRejected(
                f"{where}.createTrial.requestId {rid} was already used; each trial needs a "
                "new request id (uuid.uuid4())"
            )
        hparams = body.get("hyperparams", "{}")
        if isinstance(hparams, str):
            try:
                hparams = json.loads(hparams or "{}")
            except ValueError as e:
                raise SearcherEventRejected(
                    f"{where}.createTrial.hyperparams is not valid JSON: {e}"
                ) from None
        if not isinstance(hparams, dict):
            raise SearcherEventRejected(
                f"{where}.createTrial.hyperparams must be a JSON object, got {hparams!r}"
            )
        new[rid] = True
        # a stable per-trial seed, as the built-in searchers give each trial one
        return Create(rid, hparams, None, uuid.UUID(rid).int % (2**31))
    if kind == "trialOperation":
        inner = body.get("validateAfter")
        if not isinstance(inner, Mapping):
            raise SearcherEventRejected(f"{where}.trialOperation must set validateAfter")
        rid = _known(
            _request_id(inner.get("requestId"), f"{where}.validateAfter"),
            f"{where}.validateAfter",
            requested,
            new,
        )
        try:
            length = int(str(inner.get("length")))
        except ValueError:
            length = 0
        if not 1 <= length <= MAX_LENGTH:
            raise SearcherEventRejected(
                f"{where}.validateAfter.length must be an integer from 1 to {MAX_LENGTH} "
                f"(units of searcher.unit), got {inner.get('length')!r}"
            )
        return ValidateAfter(rid, length)
    if kind == "closeTrial":
        rid = _request_id(body.get("requestId"), f"{where}.closeTrial")
        return Close(_known(rid, f"{where}.closeTrial", requested, new))
    if kind == "shutDown":
        return Shutdown(cancel=bool(body.get("cancel")), failure=bool(body.get("failure")))
    value = body.get("progress", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise SearcherEventRejected(
            f"{where}.setSearcherProgress.progress must be a number in [0, 1]"
        )
    return min(max(float(value), 0.0), 1.0)
