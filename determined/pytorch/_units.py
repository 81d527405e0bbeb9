"""``TrainUnit``, ``Batch`` and ``Epoch``: how long to train and how often to act.

An int value is a period (``should_stop(n)`` is true every ``value`` units; below 1 means every
unit); a container value is a schedule (``should_stop(n)`` is ``n in value``).
"""

from __future__ import annotations

import sys
from collections.abc import Container
from typing import Any

from determined import core


class TrainUnit:
    """A length of training, in batches or epochs. Use :class:`Batch` or :class:`Epoch`."""

    def __init__(self, value: int | Container[int]) -> None:
        self.value = value

    def should_stop(self, step_num: int) -> bool:
        """True when ``step_num`` (1-based count of units done) hits this period or schedule."""
        if isinstance(self.value, int):
            return self._divides(step_num)
        return step_num in self.value

    def _divides(self, step_num: int) -> bool:
        assert isinstance(self.value, int)
        if self.value < 1:
            return True
        return step_num > 0 and step_num % self.value == 0

    @staticmethod
    def _from_values(
        batches: int | None = None,
        records: int | None = None,
        epochs: int | None = None,
        global_batch_size: int | None = None,
    ) -> TrainUnit:
        """Build from an experiment-config period such as ``{"batches": 100}``."""
        given = [v for v in (batches, records, epochs) if v is not None]
        if len(given) != 1:
            raise ValueError(
                "a period takes exactly one of batches, records or epochs, got "
                f"batches={batches}, records={records}, epochs={epochs}"
            )
        value = given[0]
        if value < 1:
            value = sys.maxsize
        if batches is not None:
            return Batch(value)
        if epochs is not None:
            return Epoch(value)
        if not global_batch_size:
            raise ValueError("a period in records needs hyperparameters.global_batch_size")
        if value == sys.maxsize:
            return Batch(sys.maxsize)
        return Batch(max(value // global_batch_size, 1))

    @staticmethod
    def _from_searcher_unit(
        length: int, unit: core.Unit | None, global_batch_size: int | None = None
    ) -> TrainUnit:
        """Build the unit of a searcher operation of ``length`` in ``unit``."""
        if unit == core.Unit.EPOCHS:
            return Epoch(length)
        if unit == core.Unit.BATCHES:
            return Batch(length)
        if unit == core.Unit.RECORDS:
            if not global_batch_size:
                raise ValueError(
                    "searcher lengths in records need hyperparameters.global_batch_size"
                )
            return Batch(max(length // global_batch_size, 1))
        raise ValueError(
            f"searcher unit {unit!r} is not configured: set searcher.max_length to "
            "{batches: N}, {records: N} or {epochs: N}"
        )

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self.value)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class Batch(TrainUnit):
    """A number of batches (per rank), or a schedule of batch counts."""


class Epoch(TrainUnit):
    """A number of epochs (passes over this rank's shard), or a schedule of epoch counts."""
