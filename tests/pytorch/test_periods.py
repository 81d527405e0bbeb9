"""The pure boundary logic (``_periods.due``) and TrainUnit, without torch training
(docs/reference/harness.md §9, §12)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined import core
from determined.pytorch import Batch, Epoch, TrainUnit
from determined.pytorch._lr_scheduler import LRScheduler, auto_steps
from determined.pytorch._periods import Boundary, Periods, due, length_reached, next_stop


def test_period_and_schedule() -> None:
    """§9 TrainUnit: an int is a period (<1 means always), a container a schedule."""
    assert [Batch(3).should_stop(n) for n in range(7)] == [False, False, False, True] + [
        False,
        False,
        True,
    ]
    assert Batch(0).should_stop(5)
    assert Batch({2, 5}).should_stop(5) and not Batch({2, 5}).should_stop(3)


def test_from_values() -> None:
    """§9: exactly one of batches/records/epochs; <1 -> maxsize; records via gbs."""
    assert TrainUnit._from_values(batches=5) == Batch(5)
    assert TrainUnit._from_values(epochs=0) == Epoch(sys.maxsize)
    assert TrainUnit._from_values(records=100, global_batch_size=32) == Batch(3)
    assert TrainUnit._from_values(records=10, global_batch_size=32) == Batch(1)
    with pytest.raises(ValueError):
        TrainUnit._from_values(batches=1, epochs=1)
    with pytest.raises(ValueError):
        TrainUnit._from_values()


def test_from_searcher_unit() -> None:
    """§9: searcher units map to Epoch/Batch/records-as-batches; None raises ValueError."""
    assert TrainUnit._from_searcher_unit(3, core.Unit.EPOCHS) == Epoch(3)
    assert TrainUnit._from_searcher_unit(3, core.Unit.BATCHES) == Batch(3)
    assert TrainUnit._from_searcher_unit(64, core.Unit.RECORDS, 16) == Batch(4)
    with pytest.raises(ValueError):
        TrainUnit._from_searcher_unit(64, core.Unit.RECORDS)
    with pytest.raises(ValueError):
        TrainUnit._from_searcher_unit(3, None)


def _simulate(length: TrainUnit, periods: Periods, epoch_len: int) -> list[list[Boundary]]:
    """Chunk ends as the controller sees them: train until something fires."""
    chunks, idx = [], 0
    while not length_reached(length, idx, epoch_len):
        fired = due(idx, epoch_len, length, periods)
        idx += 1
        if fired:
            chunks.append(fired)
    return chunks


def test_item_45_boundaries() -> None:
    """§19 item 45 (pure): Batch(10), validation every 4 -> chunks end at 4, 8, 10."""
    periods = Periods(validation=Batch(4), reporting=Batch(100))
    chunks = _simulate(Batch(10), periods, epoch_len=100)
    assert chunks == [[Boundary.VALIDATE], [Boundary.VALIDATE], [Boundary.TRAIN]]


def test_epoch_periods_fire_on_the_last_batch_of_an_epoch() -> None:
    """§12 chunk: an Epoch unit fires on the epoch's last batch only."""
    periods = Periods(validation=Epoch(1))
    assert due(4, 5, Batch(100), periods) == [Boundary.VALIDATE]
    assert due(3, 5, Batch(100), periods) == []
    assert due(9, 5, Epoch(2), periods) == [Boundary.TRAIN, Boundary.VALIDATE]


@given(
    length=st.integers(1, 60),
    val=st.integers(1, 20),
    rep=st.integers(1, 20),
    epoch_len=st.integers(1, 15),
)
def test_every_period_multiple_is_a_chunk_end(
    length: int, val: int, rep: int, epoch_len: int
) -> None:
    """Property: chunk ends are exactly the batch counts that are multiples of a period or
    the op length, and the last chunk ends at the length with TRAIN."""
    periods = Periods(validation=Batch(val), reporting=Batch(rep))
    ends, idx = [], 0
    while not length_reached(Batch(length), idx, epoch_len):
        if due(idx, epoch_len, Batch(length), periods):
            ends.append(idx + 1)
        idx += 1
    expected = [n for n in range(1, length + 1) if n % val == 0 or n % rep == 0 or n == length]
    assert ends == expected
    assert Boundary.TRAIN in due(length - 1, epoch_len, Batch(length), periods)


@given(freq=st.integers(1, 5), agg=st.integers(1, 4), n=st.integers(1, 40))
def test_every_batch_steps_total(freq: int, agg: int, n: int) -> None:
    """§12 LR auto-step: EVERY_BATCH steps once per `freq` batches however batches are
    aggregated (counted over communicating batches)."""
    mode = LRScheduler.StepMode.STEP_EVERY_BATCH
    total = sum(auto_steps(mode, freq, i, agg, 10) for i in range(n) if (i + 1) % agg == 0)
    assert total == (n - n % agg) // freq


def test_every_epoch_and_optimizer_step_modes() -> None:
    """§12 LR auto-step: EVERY_EPOCH after each epoch's last batch; OPTIMIZER_STEP counts
    batches modulo freq (Q6, kept)."""
    epoch = LRScheduler.StepMode.STEP_EVERY_EPOCH
    assert [auto_steps(epoch, 1, i, 1, 5) for i in range(10)] == [0, 0, 0, 0, 1] * 2
    opt = LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP
    assert [auto_steps(opt, 2, i, 1, 5) for i in range(4)] == [0, 1, 0, 1]
    assert auto_steps(LRScheduler.StepMode.MANUAL_STEP, 1, 4, 1, 5) == 0
    assert LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP.value == 4


_units = st.one_of(
    st.builds(Batch, st.integers(0, 12)),
    st.builds(Epoch, st.integers(0, 4)),
    st.builds(Batch, st.frozensets(st.integers(1, 40), max_size=4)),
)


@given(
    batches=st.integers(0, 30),
    epoch_len=st.integers(1, 9),
    length=st.one_of(st.builds(Batch, st.integers(1, 45)), st.builds(Epoch, st.integers(1, 5))),
    val=_units,
    ckpt=_units,
    rep=_units,
    test_mode=st.booleans(),
)
def test_next_stop_agrees_with_due(
    batches: int,
    epoch_len: int,
    length: TrainUnit,
    val: TrainUnit,
    ckpt: TrainUnit,
    rep: TrainUnit,
    test_mode: bool,
) -> None:
    """Property: next_stop is the first batch count (> batches) whose batch due() reports."""
    periods = Periods(validation=val, checkpoint=ckpt, reporting=rep)
    stop = next_stop(batches, epoch_len, length, periods, test_mode)
    first = next(
        n for n in range(batches + 1, 10_000) if due(n - 1, epoch_len, length, periods, test_mode)
    )
    assert stop == first
