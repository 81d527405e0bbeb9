"""``LRScheduler``: a wrapped learning-rate scheduler and when the loop steps it."""

from __future__ import annotations

import enum
from typing import Any

import torch


class LRScheduler:
    """A torch LR scheduler registered with ``context.wrap_lr_scheduler``, stepped by the
    training loop according to ``step_mode`` every ``frequency`` units."""

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(
        self,
        scheduler: torch.optim.lr_scheduler.LRScheduler | Any,
        step_mode: LRScheduler.StepMode,
        frequency: int = 1,
    ) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(
                f"step_mode must be an LRScheduler.StepMode, not {type(step_mode).__name__}"
            )
        if frequency < 1:
            raise ValueError(f"frequency is {frequency}, but must be at least 1")
        self._scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    def _auto_steps(self, batch_idx: int, agg: int, epoch_len: int) -> int:
        return auto_steps(self._step_mode, self._frequency, batch_idx, agg, epoch_len)

    def step(self, *args: Any, **kwargs: Any) -> None:
        self._scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return list(self._scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self._scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._scheduler.load_state_dict(state_dict)


def auto_steps(
    mode: LRScheduler.StepMode, frequency: int, batch_idx: int, agg: int, epoch_len: int
) -> int:
    """How many times to step after communicating batch ``batch_idx`` (pure; Determined 0.37's
    rules, including EVERY_OPTIMIZER_STEP counting batches modulo ``frequency``)."""
    step = LRScheduler.StepMode
    if mode == step.STEP_EVERY_BATCH:
        return sum(1 for i in range(batch_idx - agg + 1, batch_idx + 1) if (i + 1) % frequency == 0)
    if mode == step.STEP_EVERY_OPTIMIZER_STEP:
        return int((batch_idx + 1) % frequency == 0)
    if mode == step.STEP_EVERY_EPOCH:
        first, last = batch_idx // epoch_len, (batch_idx + agg) // epoch_len
        if agg == 1:
            first, last = batch_idx // epoch_len, (batch_idx + 1) // epoch_len
        return sum(1 for e in range(first, last) if (e + 1) % frequency == 0)
    return 0
