"""Validation reducers and custom MetricReducers (docs/reference/harness.md §10, §12 validation)."""

from __future__ import annotations

from typing import Any

import pytest
from _kit.pytorch_trials import MLPTrial, run_local

from determined import errors
from determined.pytorch import Batch, MetricReducer, Reducer
from determined.pytorch._reducer import _cross_rank_reduce, _per_rank_reduce


def test_enum_values() -> None:
    """§10: Reducer values AVG=1, SUM=2, MAX=3, MIN=4."""
    assert [r.value for r in (Reducer.AVG, Reducer.SUM, Reducer.MAX, Reducer.MIN)] == [1, 2, 3, 4]


def test_cross_rank_avg_is_weighted_by_batch_count() -> None:
    """§19 item 50: AVG across ranks is weighted by each rank's batch count; SUM/MIN/MAX as
    named."""
    rank0 = [{"a": 1.0, "s": 1.0, "mx": 1.0, "mn": 1.0}] * 3
    rank1 = [{"a": 5.0, "s": 2.0, "mx": 7.0, "mn": -1.0}]
    spec = {"a": Reducer.AVG, "s": Reducer.SUM, "mx": Reducer.MAX, "mn": Reducer.MIN}
    per = [(_per_rank_reduce(r, spec), len(r)) for r in (rank0, rank1)]
    out = _cross_rank_reduce(per, spec)
    assert out == {"a": 2.0, "s": 5.0, "mx": 7.0, "mn": -1.0}


def test_dict_reducer_needs_exact_keys() -> None:
    """§19 item 50: a dict reducer needs exactly the metric key set."""
    with pytest.raises(errors.InvalidExperimentException):
        _per_rank_reduce([{"a": 1.0, "b": 2.0}], {"a": Reducer.AVG})


class SumTrial(MLPTrial):
    def evaluation_reducer(self) -> Any:
        return {"val_loss": Reducer.SUM, "n": Reducer.SUM}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        out = super().evaluate_batch(batch, batch_idx)
        return {**out, "n": len(batch[0])}


def test_sum_reducer_end_to_end() -> None:
    """§12 validation: SUM adds over batches."""
    _, cap, _ = run_local(SumTrial, validation_period=Batch(10))
    assert cap.validation[0]["n"] == 12


class Count(MetricReducer):
    def __init__(self) -> None:
        self.n = 0

    def reset(self) -> None:
        self.n = 0

    def update(self, k: int) -> None:
        self.n += k

    def per_slot_reduce(self) -> Any:
        return self.n

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        return {"seen": sum(per_slot_metrics)}


class ReducerTrial(MLPTrial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.count = context.wrap_reducer(Count(), for_training=False)
        self.maxer = context.wrap_reducer(lambda vs: max(vs), name="biggest")

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.maxer.update(batch_idx)  # type: ignore[attr-defined]
        return super().train_batch(batch, epoch_idx, batch_idx)

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        self.count.update(len(batch[0]))  # type: ignore[attr-defined]
        self.maxer.update(-1)  # type: ignore[attr-defined]
        return super().evaluate_batch(batch, batch_idx)


def test_wrapped_reducers_reset_per_chunk_and_merge() -> None:
    """§10 wrap_reducer: a MetricReducer's dict merges in; a named function reducer gives one
    value; both reset before each training chunk and validation."""
    _, cap, _ = run_local(ReducerTrial, reporting_period=Batch(5), validation_period=Batch(10))
    assert [avg["biggest"] for avg, _ in cap.training] == [4, 9]
    assert cap.validation[0]["seen"] == 12
    assert cap.validation[0]["biggest"] == -1


def test_wrap_reducer_twice_or_bad_type() -> None:
    """§10: wrapping the same reducer twice or a bad type raises AssertionError."""
    from determined.pytorch import init

    with init(hparams={}) as ctx:
        r = Count()
        ctx.wrap_reducer(r)
        with pytest.raises(AssertionError):
            ctx.wrap_reducer(r)
        with pytest.raises(AssertionError):
            ctx.wrap_reducer(3)  # type: ignore[arg-type]
