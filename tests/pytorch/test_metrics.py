"""determined/pytorch/_metrics.py: a chunk's per-batch metrics become numbers in one go, with
the same values (and Python types) as converting each batch's values one by one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.pytorch import _metrics

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool]


def one_by_one(value: Any) -> Any:
    """The reference's conversion of one value: to numpy (floats widened), then to Python."""
    if isinstance(value, torch.Tensor):
        value = value.float() if value.is_floating_point() else value
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return value.item() if value.size == 1 else value.tolist()
    return value


@st.composite
def chunks(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 8))
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.sampled_from([(), (1,), (1, 1), (2,), (0,)]))
    mixed_shapes = draw(st.booleans())
    out = []
    for i in range(n):
        s = draw(st.sampled_from([(), (1,)])) if mixed_shapes else shape
        value = torch.tensor(draw(st.floats(-1e6, 1e6)), dtype=torch.float64)
        batch: dict[str, Any] = {"m": value.expand(s).clone().to(dtype), "plain": float(i)}
        out.append(batch)
    return out


@settings(max_examples=150, deadline=None)
@given(chunks())
def test_to_numbers_equals_converting_each_value(batches: list[dict[str, Any]]) -> None:
    got = _metrics.to_numbers(batches)
    expected = [{k: one_by_one(v) for k, v in b.items()} for b in batches]
    assert got == expected
    for g, e in zip(got, expected, strict=True):
        assert type(g["m"]) is type(e["m"])  # ints stay ints, bools stay bools


def test_a_loss_per_batch_is_one_float_per_batch() -> None:
    batches = [{"loss": torch.tensor(0.5 * i)} for i in range(4)]
    assert _metrics.to_numbers(batches) == [{"loss": 0.5 * i} for i in range(4)]


def test_batches_with_different_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="same metrics"):
        _metrics.to_numbers([{"loss": torch.tensor(1.0)}, {"acc": torch.tensor(1.0)}])
