"""``SearchMethod``, the operations it returns and the ``SearcherState`` a runner keeps
(Determined 0.37's ``determined.searcher``; docs/reference/custom_searchers.md)."""

from __future__ import annotations

import abc
import dataclasses
import enum
import json
import pathlib
import uuid
from typing import Any

STATE_FILE = "state"


@dataclasses.dataclass
class SearcherState:
    """What a search runner knows about the experiment's trials, passed (read-only) to every
    ``SearchMethod`` callback. Keep a method's own state in the method
    (:meth:`SearchMethod.save_method_state`).

    Attributes:
        failures: request ids of trials that errored
        trial_progress: per trial, the units it trained so far (0.0 when created)
        trials_closed: request ids of closed trials
        trials_created: request ids of created trials
        last_event_id: the id of the last searcher event the runner handled
    """

    failures: set[uuid.UUID]
    trial_progress: dict[uuid.UUID, float]
    trials_closed: set[uuid.UUID]
    trials_created: set[uuid.UUID]
    last_event_id: int = 0
    experiment_completed: bool = False
    experiment_failed: bool = False

    def __init__(self) -> None:
        self.failures = set()
        self.trial_progress = {}
        self.trials_closed = set()
        self.trials_created = set()
        self.last_event_id = 0
        self.experiment_id: int | None = None
        self.experiment_completed = False
        self.experiment_failed = False

    def to_dict(self) -> dict[str, Any]:
        """The state as JSON-able data (0.37's file layout: camelCase keys)."""
        return {
            "failures": sorted(str(f) for f in self.failures),
            "trialProgress": {str(k): v for k, v in self.trial_progress.items()},
            "trialsClosed": sorted(str(t) for t in self.trials_closed),
            "trialsCreated": sorted(str(t) for t in self.trials_created),
            "lastEventId": self.last_event_id,
            "experimentId": self.experiment_id,
            "experimentCompleted": self.experiment_completed,
            "experimentFailed": self.experiment_failed,
        }

    def from_dict(self, d: dict[str, Any]) -> None:
        """Replace this state with what :meth:`to_dict` returned."""
        self.failures = {uuid.UUID(f) for f in d.get("failures", [])}
        self.trial_progress = {uuid.UUID(k): v for k, v in d.get("trialProgress", {}).items()}
        self.trials_closed = {uuid.UUID(t) for t in d.get("trialsClosed", [])}
        self.trials_created = {uuid.UUID(t) for t in d.get("trialsCreated", [])}
        self.last_event_id = int(d.get("lastEventId", 0))
        self.experiment_id = d.get("experimentId")
        self.experiment_completed = bool(d.get("experimentCompleted", False))
        self.experiment_failed = bool(d.get("experimentFailed", False))


class ExitedReason(enum.Enum):
    """Why a trial exited early: ``ERRORED`` (an exception), ``USER_CANCELED`` (a user
    stopped it), ``INVALID_HP`` (it raised ``InvalidHP``)."""

    ERRORED = "ERRORED"
    USER_CANCELED = "USER_CANCELED"
    INVALID_HP = "INVALID_HP"

    @classmethod
    def _from_wire(cls, value: str) -> ExitedReason:
        """From a ``v1TrialExitedEarlyExitedReason`` name."""
        found = _WIRE_REASONS.get(value)
        if found is None:
            raise RuntimeError(f"Invalid exited reason: {value}")
        return found


_WIRE_REASONS = {
    "EXITED_REASON_INVALID_HP": ExitedReason.INVALID_HP,
    "EXITED_REASON_USER_REQUESTED_STOP": ExitedReason.USER_CANCELED,
    "EXITED_REASON_USER_CANCELED": ExitedReason.USER_CANCELED,
    "EXITED_REASON_UNSPECIFIED": ExitedReason.ERRORED,
}


class Operation(metaclass=abc.ABCMeta):
    """What a ``SearchMethod`` asks the master to do."""

    @abc.abstractmethod
    def _to_searcher_operation(self) -> dict[str, Any]:
        """The ``v1SearcherOperation`` JSON."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, json.dumps(self._to_searcher_operation())))


class ValidateAfter(Operation):
    """Train the trial until it has trained ``length`` units in total (``searcher.unit``),
    then validate it and report the searcher metric."""

    def __init__(self, request_id: uuid.UUID, length: int) -> None:
        super().__init__()
        self.request_id = request_id
        self.length = length

    def _to_searcher_operation(self) -> dict[str, Any]:
        return {
            "trialOperation": {
                "validateAfter": {"requestId": str(self.request_id), "length": str(self.length)}
            }
        }


class Close(Operation):
    """No more work for the trial: it ends after its current operation."""

    def __init__(self, request_id: uuid.UUID) -> None:
        super().__init__()
        self.request_id = request_id

    def _to_searcher_operation(self) -> dict[str, Any]:
        return {"closeTrial": {"requestId": str(self.request_id)}}


class Progress(Operation):
    """The search's progress, a number in [0, 1] (shown as the experiment's progress)."""

    def __init__(self, progress: float) -> None:
        super().__init__()
        self.progress = progress

    def _to_searcher_operation(self) -> dict[str, Any]:
        return {"setSearcherProgress": {"progress": float(self.progress)}}


class Shutdown(Operation):
    """End the experiment: COMPLETED, or CANCELED with ``cancel``, or ERROR with
    ``failure`` (running trials are stopped first)."""

    def __init__(self, cancel: bool = False, failure: bool = False) -> None:
        super().__init__()
        self.cancel = cancel
        self.failure = failure

    def _to_searcher_operation(self) -> dict[str, Any]:
        return {"shutDown": {"cancel": bool(self.cancel), "failure": bool(self.failure)}}


class Create(Operation):
    """Create a trial with these hyperparameters; ``request_id`` names it in every later
    operation and event. ``checkpoint`` is accepted for 0.37 compatibility and not sent (0.37
    sent none either)."""

    def __init__(
        self,
        request_id: uuid.UUID,
        hparams: dict[str, Any],
        checkpoint: Any | None,
    ) -> None:
        super().__init__()
        self.request_id = request_id
        self.hparams = json.dumps(hparams)
        self.checkpoint = checkpoint

    def _to_searcher_operation(self) -> dict[str, Any]:
        return {"createTrial": {"hyperparams": self.hparams, "requestId": str(self.request_id)}}


def _operation_from_wire(op: dict[str, Any]) -> Operation:
    """The inverse of ``_to_searcher_operation`` (a saved runner state's operations)."""
    if "createTrial" in op:
        body = op["createTrial"]
        create = Create(uuid.UUID(body["requestId"]), {}, None)
        create.hparams = body["hyperparams"]
        return create
    if "trialOperation" in op:
        body = op["trialOperation"]["validateAfter"]
        return ValidateAfter(uuid.UUID(body["requestId"]), int(body["length"]))
    if "closeTrial" in op:
        return Close(uuid.UUID(op["closeTrial"]["requestId"]))
    if "setSearcherProgress" in op:
        return Progress(float(op["setSearcherProgress"]["progress"]))
    if "shutDown" in op:
        body = op["shutDown"]
        return Shutdown(cancel=bool(body.get("cancel")), failure=bool(body.get("failure")))
    raise ValueError(f"not a searcher operation: {op!r}")


class SearchMethod:
    """A custom hyperparameter search: subclass it and override the event handlers.

    Every handler except :meth:`progress` returns the operations (:class:`Create`,
    :class:`ValidateAfter`, :class:`Close`, :class:`Shutdown`, :class:`Progress`) for the
    master to carry out, in order. The ``searcher_state`` passed in is the runner's; do not
    modify it. Keep the method's own state in attributes and persist it with
    :meth:`save_method_state` / :meth:`load_method_state`, so a restarted runner continues.
    """

    def __init__(self) -> None:
        """Nothing to set up here; subclasses call ``super().__init__()`` as in 0.37 (which
        warned that the feature was deprecated; it is maintained here)."""

    @abc.abstractmethod
    def initial_operations(self, searcher_state: SearcherState) -> list[Operation]:
        """The first operations of the search (typically some ``Create``)."""

    @abc.abstractmethod
    def on_trial_created(
        self, searcher_state: SearcherState, request_id: uuid.UUID
    ) -> list[Operation]:
        """The trial of ``Create(request_id)`` exists (typically answer ``ValidateAfter``)."""

    @abc.abstractmethod
    def on_validation_completed(
        self, searcher_state: SearcherState, request_id: uuid.UUID, metric: Any, train_length: int
    ) -> list[Operation]:
        """The trial trained ``train_length`` units in total and validated; ``metric`` is its
        searcher metric."""

    @abc.abstractmethod
    def on_trial_closed(
        self, searcher_state: SearcherState, request_id: uuid.UUID
    ) -> list[Operation]:
        """The trial ended (after a ``Close``, or after it exited early)."""

    @abc.abstractmethod
    def progress(self, searcher_state: SearcherState) -> float:
        """The search's progress in [0, 1]."""

    @abc.abstractmethod
    def on_trial_exited_early(
        self,
        searcher_state: SearcherState,
        request_id: uuid.UUID,
        exited_reason: ExitedReason,
    ) -> list[Operation]:
        """The trial stopped before its work was done; it is closed already (no ``Close``
        needed) and ``on_trial_closed`` follows."""

    def save(
        self, searcher_state: SearcherState, path: pathlib.Path, *, experiment_id: int
    ) -> None:
        """Write the runner's state and the method's own state (:meth:`save_method_state`)
        into the directory ``path``."""
        d = searcher_state.to_dict()
        d["experimentId"] = experiment_id
        tmp = path.joinpath(STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(d))
        tmp.replace(path.joinpath(STATE_FILE))
        self.save_method_state(path)

    def save_method_state(self, path: pathlib.Path) -> None:
        """Write the method's own state into the directory ``path`` (default: nothing)."""

    def load(self, path: pathlib.Path) -> tuple[SearcherState, int]:
        """Read what :meth:`save` wrote; return the runner's state and the experiment id."""
        d = json.loads(path.joinpath(STATE_FILE).read_text())
        state = SearcherState()
        state.from_dict(d)
        self.load_method_state(path)
        return state, int(d["experimentId"])

    def load_method_state(self, path: pathlib.Path) -> None:
        """Read what :meth:`save_method_state` wrote (default: nothing)."""
