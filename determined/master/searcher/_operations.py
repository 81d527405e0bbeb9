"""Operations and the early-exit reasons that every search method and the master share.

A search method is a pure state machine: the master tells it what happened to trials (events)
and it answers with operations. It touches no clock, database, network or global RNG; the
master persists ``snapshot()`` in the same transaction as the event that produced it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class Create:
    """Start a new trial. ``request_id`` names it in every later operation and event;
    ``trial_seed`` (in ``[0, 2**31)``) is the seed the trial's process gets."""

    request_id: str
    hparams: dict[str, Any] = field(hash=False)
    checkpoint: str | None = None
    trial_seed: int = 0


@dataclass(frozen=True)
class ValidateAfter:
    """Train the trial until its total trained length equals ``length`` (absolute, in the unit
    of ``searcher.max_length``), validate, and report the searcher metric."""

    request_id: str
    length: int


@dataclass(frozen=True)
class Close:
    """No more work for the trial after its current operation. A trial told to close while it
    waits for work ends; under the 0.38-style ``time_metric`` searcher this is the "stop"
    action, delivered to the running trial as a preemption signal."""

    request_id: str


@dataclass(frozen=True)
class Shutdown:
    """The search is over. ``cancel``: every trial was canceled; ``failure``: every trial
    errored (the experiment ends CANCELED / ERROR, otherwise COMPLETED)."""

    cancel: bool = False
    failure: bool = False


Operation = Union[Create, ValidateAfter, Close, Shutdown]


class ExitedReason(str, enum.Enum):
    """Why a trial stopped before its operations were done (the reference's names)."""

    ERRORED = "ERRORED"
    USER_CANCELED = "USER_CANCELED"
    INVALID_HP = "INVALID_HP"
    INIT_INVALID_HP = "INIT_INVALID_HP"

    @property
    def is_invalid_hp(self) -> bool:
        return self in (ExitedReason.INVALID_HP, ExitedReason.INIT_INVALID_HP)


def operation_to_dict(op: Operation) -> dict[str, Any]:
    """A JSON-able form of ``op`` (``{"type": "create", ...}``), for logs and persistence."""
    if isinstance(op, Create):
        return {
            "type": "create",
            "request_id": op.request_id,
            "hparams": op.hparams,
            "checkpoint": op.checkpoint,
            "trial_seed": op.trial_seed,
        }
    if isinstance(op, ValidateAfter):
        return {"type": "validate_after", "request_id": op.request_id, "length": op.length}
    if isinstance(op, Close):
        return {"type": "close", "request_id": op.request_id}
    return {"type": "shutdown", "cancel": op.cancel, "failure": op.failure}


def operation_from_dict(data: dict[str, Any]) -> Operation:
    """The inverse of :func:`operation_to_dict`."""
    kind = data["type"]
    if kind == "create":
        return Create(data["request_id"], data["hparams"], data["checkpoint"], data["trial_seed"])
    if kind == "validate_after":
        return ValidateAfter(data["request_id"], int(data["length"]))
    if kind == "close":
        return Close(data["request_id"])
    if kind == "shutdown":
        return Shutdown(bool(data["cancel"]), bool(data["failure"]))
    raise ValueError(f"unknown operation type {kind!r}")
