"""The values of the store's state and partition columns: experiment and trial states,
allocation states, metric partitions. What may follow what is the experiment domain's
(``experiment/_states.py``); here are only the values and their two families (terminal,
stopping), which queries filter on."""

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
