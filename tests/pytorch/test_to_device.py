"""determined/pytorch/_to_device.py: to_device and data_length
(docs/reference/harness.md §19 item 70)."""

from __future__ import annotations

import collections
import logging
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

from determined.pytorch import data_length, to_device

# Moving to the meta device is a real device transfer that works without a GPU.
META = torch.device("meta")


class Pair(NamedTuple):
    x: Any
    y: Any


class Movable:
    def __init__(self) -> None:
        self.device: object = None

    def to(self, device: torch.device) -> Movable:
        self.device = device
        return self


def test_moves_nested_structures() -> None:
    batch = {
        "x": [torch.ones(2), (np.zeros(3, dtype=np.float32), np.arange(2))],
        "pair": Pair(torch.zeros(1), np.array([True, False])),
        "od": collections.OrderedDict(a=torch.ones(1)),
    }
    out = to_device(batch, META)
    assert out["x"][0].device == META
    assert isinstance(out["x"][1], tuple)
    assert out["x"][1][0].device == META and out["x"][1][0].dtype == torch.float32
    assert out["x"][1][1].dtype == torch.int64
    assert isinstance(out["pair"], Pair) and out["pair"].y.device == META
    assert out["pair"].y.dtype == torch.bool
    assert type(out["od"]) is collections.OrderedDict and out["od"]["a"].device == META


@pytest.mark.parametrize(
    "dtype", [np.float16, np.float64, np.complex64, np.int8, np.uint8, np.int32, np.bool_]
)
def test_numeric_ndarrays_become_tensors(dtype: type) -> None:
    out = to_device(np.zeros(2, dtype=dtype), "cpu")
    assert isinstance(out, torch.Tensor)
    assert out.dtype == torch.from_numpy(np.zeros(1, dtype=dtype)).dtype


def test_cpu_ndarray_shares_memory() -> None:
    arr = np.zeros(3, dtype=np.float32)
    out = to_device(arr, "cpu")
    arr[0] = 7
    assert out[0].item() == 7


def test_objects_with_to_are_moved() -> None:
    m = Movable()
    assert to_device([m], META)[0].device == META


def test_unsupported_types_pass_through_with_one_warning_per_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strings = np.array(["a", "b"])
    batch = ["label", "other", None, strings, np.array([object()], dtype=object), 3]
    with caplog.at_level(logging.WARNING, logger="determined.pytorch"):
        out = to_device(batch, "cpu")
    assert out[:3] == ["label", "other", None] and out[3] is strings and out[5] == 3
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 4  # str, NoneType, ndarray, int: once each
    assert sum("str" in w for w in warned) == 1


def test_shared_warned_types_warn_once_across_calls(caplog: pytest.LogCaptureFixture) -> None:
    seen: set[type] = set()
    with caplog.at_level(logging.WARNING, logger="determined.pytorch"):
        to_device("a", "cpu", seen)
        to_device("b", "cpu", seen)
    assert len(caplog.records) == 1 and seen == {str}


def test_non_blocking_is_accepted() -> None:
    out = to_device({"x": torch.ones(2)}, "cpu", non_blocking=True)
    assert torch.equal(out["x"], torch.ones(2))


def test_data_length() -> None:
    assert data_length(torch.zeros(5, 2)) == 5
    assert data_length(np.zeros((4, 3))) == 4
    assert data_length({"a": torch.zeros(3), "b": torch.zeros(9)}) == 3
    assert data_length([torch.zeros(2), torch.zeros(1)]) == 2
    assert data_length((np.zeros(6),)) == 6


@pytest.mark.parametrize("empty", [{}, [], ()])
def test_data_length_of_empty_container_is_value_error(empty: Any) -> None:
    with pytest.raises(ValueError, match="empty"):
        data_length(empty)


@pytest.mark.parametrize("bad", [3, "abc", None, Movable()])
def test_data_length_of_other_types_is_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="get_batch_length"):
        data_length(bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pinned_batches_move_to_cuda() -> None:
    import determined.pytorch as det_torch

    ds = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2), torch.arange(4))
    loader = det_torch.DataLoader(ds, batch_size=2, pin_memory=True).get_data_loader()
    for x, y in loader:
        assert x.is_pinned()
        moved = to_device({"x": x, "y": [y]}, torch.device("cuda"), non_blocking=True)
        assert moved["x"].is_cuda and moved["y"][0].is_cuda
        assert torch.equal(moved["x"].cpu(), x)


def _same_leaves(a: Any, b: Any) -> bool:
    """Equal structure, and tensors equal in value, dtype and device."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.device == b.device
            and a.dtype == b.dtype
            and torch.equal(a.cpu(), b.cpu())
        )
    if isinstance(a, dict):
        return (
            type(a) is type(b) and a.keys() == b.keys() and all(_same_leaves(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same_leaves(x, y) for x, y in zip(a, b, strict=True))
        )
    return a is b


@pytest.mark.parametrize(
    "make",
    [
        lambda: [torch.ones(2, 3), torch.arange(2)],
        lambda: (torch.ones(2), torch.zeros(1, dtype=torch.int64)),
        lambda: {"x": torch.ones(2), "y": torch.arange(3)},
        lambda: torch.ones(4),
        lambda: [torch.ones(2), np.arange(3)],  # numpy inside: converted
        lambda: {"x": np.ones(2, dtype=np.float32), "ids": "abc"},
        lambda: Pair(torch.ones(1), np.zeros(2)),
        lambda: [[torch.ones(1)], torch.zeros(1)],
        lambda: [],
    ],
)
def test_the_loops_cpu_mover_gives_what_to_device_gives(make: Any) -> None:
    """The training loop's mover skips Tensor.to for CPU tensors in plain containers, but
    its result is to_device's: same structure, types, values and devices."""
    from determined.pytorch import _to_device

    mover = _to_device.batch_mover(torch.device("cpu"), set())
    assert _same_leaves(mover(make()), to_device(make(), "cpu"))


def test_the_loops_cpu_mover_hands_cpu_batches_back_untouched() -> None:
    from determined.pytorch import _to_device

    batch = [torch.ones(2), torch.arange(2)]
    assert _to_device.batch_mover(torch.device("cpu"), set())(batch) is batch


def test_the_loops_mover_to_another_device_moves_every_tensor() -> None:
    from determined.pytorch import _to_device

    out = _to_device.batch_mover(META, set())([torch.ones(2), {"y": torch.arange(2)}])
    assert out[0].device == META and out[1]["y"].device == META
