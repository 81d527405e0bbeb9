"""Experiment, trial and allocation states as data: enums and the legal transitions
(spec/master.md §4.1–§4.2). Nothing here touches the store."""

from __future__ import annotations

import enum


class State(str, enum.Enum):
    """Experiment and trial states, with the wire names of ``experimentv1.State``."""

    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    COMPLETED = "STATE_COMPLETED"
    CANCELED = "STATE_CANCELED"
    ERROR = "STATE_ERROR"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL

    @property
    def is_stopping(self) -> bool:
        return self in STOPPING


TERMINAL = frozenset({State.COMPLETED, State.CANCELED, State.ERROR})
STOPPING = frozenset(
    {
        State.STOPPING_COMPLETED,
        State.STOPPING_CANCELED,
        State.STOPPING_KILLED,
        State.STOPPING_ERROR,
    }
)

# Where each stopping state ends once nothing runs any more (a kill ends CANCELED).
TERMINAL_OF = {
    State.STOPPING_COMPLETED: State.COMPLETED,
    State.STOPPING_CANCELED: State.CANCELED,
    State.STOPPING_KILLED: State.CANCELED,
    State.STOPPING_ERROR: State.ERROR,
}

_ANY_STOP = STOPPING | {State.ERROR}
TRANSITIONS: dict[State, frozenset[State]] = {
    State.ACTIVE: frozenset({State.PAUSED} | _ANY_STOP),
    State.PAUSED: frozenset({State.ACTIVE} | _ANY_STOP),
    State.STOPPING_COMPLETED: frozenset({State.COMPLETED, State.ERROR}),
    State.STOPPING_CANCELED: frozenset(
        {State.STOPPING_KILLED, State.STOPPING_ERROR, State.CANCELED, State.ERROR}
    ),
    State.STOPPING_KILLED: frozenset({State.CANCELED, State.ERROR}),
    State.STOPPING_ERROR: frozenset({State.ERROR}),
    State.COMPLETED: frozenset(),
    State.CANCELED: frozenset(),
    State.ERROR: frozenset(),
}

# Trial stopping states only escalate: a trial being killed is not merely canceled later.
_SEVERITY = {
    State.STOPPING_COMPLETED: 0,
    State.STOPPING_CANCELED: 1,
    State.STOPPING_KILLED: 2,
    State.STOPPING_ERROR: 3,
}


def can_transition(old: State, new: State) -> bool:
    """Whether ``old -> new`` is legal (same-state requests are the caller's no-op)."""
    return new in TRANSITIONS[old]


def trial_escalation(old: State, new: State) -> State:
    """The state a trial in ``old`` ends up in when asked to move to ``new``: terminal states
    ignore everything, stopping states only move to a more severe stop or their end."""
    if old.is_terminal:
        return old
    if old.is_stopping and new.is_stopping:
        return new if _SEVERITY[new] > _SEVERITY[old] else old
    return new if can_transition(old, new) else old


class AllocationState(str, enum.Enum):
    """One run of a trial: handed to the resource manager, running, or over."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    TERMINATED = "TERMINATED"


class Partition(str, enum.Enum):
    """Metric partitions: the rollback rule differs within one and across them."""

    TRAINING = "TRAINING"
    VALIDATION = "VALIDATION"
    GENERIC = "GENERIC"

    @classmethod
    def of(cls, group: str) -> Partition:
        if group == "training":
            return cls.TRAINING
        if group == "validation":
            return cls.VALIDATION
        return cls.GENERIC
