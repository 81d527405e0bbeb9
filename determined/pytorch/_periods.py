"""When the training loop stops a chunk and what it does then: pure functions, no torch.

After each batch the loop asks :func:`due` which boundaries that batch completed. Boundaries
come back in a fixed order (TRAIN, VALIDATE, CHECKPOINT, REPORT) and the loop handles them in
that order; training metrics are reported whenever any boundary fires.
"""

from __future__ import annotations

import dataclasses
import enum
import sys

from determined.pytorch._units import Batch, Epoch, TrainUnit


class Boundary(enum.Enum):
    TRAIN = 0  # the searcher operation's length is reached
    VALIDATE = 1
    CHECKPOINT = 2
    REPORT = 3


@dataclasses.dataclass(frozen=True)
class Periods:
    validation: TrainUnit = dataclasses.field(default_factory=lambda: Batch(sys.maxsize))
    checkpoint: TrainUnit = dataclasses.field(default_factory=lambda: Batch(sys.maxsize))
    reporting: TrainUnit = dataclasses.field(default_factory=lambda: Batch(100))


def _period_fired(unit: TrainUnit, batch_idx: int, epoch_len: int) -> bool:
    if isinstance(unit, Epoch):
        # Epoch periods are checked on an epoch's last batch only.
        last_of_epoch = batch_idx % epoch_len == epoch_len - 1
        return last_of_epoch and unit.should_stop(batch_idx // epoch_len + 1)
    return unit.should_stop(batch_idx + 1)


def length_reached(length: TrainUnit, batches: int, epoch_len: int) -> bool:
    """Whether ``batches`` trained batches reach an absolute ``length`` (Batch or Epoch)."""
    if not isinstance(length.value, int):
        raise TypeError(f"a training length needs an int value, not {length!r}")
    if isinstance(length, Epoch):
        return batches // epoch_len >= length.value
    return batches >= length.value


def due(
    batch_idx: int,
    epoch_len: int,
    length: TrainUnit,
    periods: Periods,
    test_mode: bool = False,
) -> list[Boundary]:
    """The boundaries completed by training batch ``batch_idx`` (0-based, per rank), towards
    an absolute ``length``. In test mode every batch completes the operation."""
    fired = []
    if test_mode or length_reached(length, batch_idx + 1, epoch_len):
        fired.append(Boundary.TRAIN)
    for boundary, unit in (
        (Boundary.VALIDATE, periods.validation),
        (Boundary.CHECKPOINT, periods.checkpoint),
        (Boundary.REPORT, periods.reporting),
    ):
        if _period_fired(unit, batch_idx, epoch_len):
            fired.append(boundary)
    return fired


def _next_count(unit: TrainUnit, n: int) -> int:
    """The smallest count ``m > n`` with ``unit.should_stop(m)``."""
    value = unit.value
    if isinstance(value, int):
        return n + 1 if value < 1 else (n // value + 1) * value
    try:
        return min((m for m in value if m > n), default=sys.maxsize)  # type: ignore[attr-defined]
    except TypeError:
        return n + 1  # a Container that cannot be iterated: ask after every unit


def _next_fire(unit: TrainUnit, batches: int, epoch_len: int) -> int:
    if isinstance(unit, Epoch):
        return _next_count(unit, batches // epoch_len) * epoch_len
    return _next_count(unit, batches)


def next_stop(
    batches: int, epoch_len: int, length: TrainUnit, periods: Periods, test_mode: bool = False
) -> int:
    """The batch count at which the next boundary fires, from ``batches`` trained: the loop
    trains up to it without asking :func:`due` after every batch (same answers, by test)."""
    if not isinstance(length.value, int):
        raise TypeError(f"a training length needs an int value, not {length!r}")
    per = epoch_len if isinstance(length, Epoch) else 1
    candidates = [batches + 1 if test_mode else max(length.value * per, batches + 1)]
    for unit in (periods.validation, periods.checkpoint, periods.reporting):
        candidates.append(_next_fire(unit, batches, epoch_len))
    return min(candidates)
