"""determined/pytorch/_staging.py: staging copies into host buffers kept between asynchronous
checkpoints (issue #19; docs/pytorch.md "Asynchronous checkpoints")."""

from __future__ import annotations

import collections
import logging
from typing import Any

import pytest
import torch

from determined.pytorch._staging import HostStaging, host_copy


def _state(scale: float = 1.0, rows: int = 4) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "models_state_dict": [
            collections.OrderedDict(
                w=torch.randn(rows, 3, generator=g) * scale,
                t=(torch.randn(3, 5, generator=g) * scale).t(),  # not contiguous
                h=torch.arange(6, dtype=torch.float16) * scale,
            )
        ],
        "optimizers_state_dict": [{"state": {0: {"step": torch.tensor(7.0)}}, "lr": 0.1}],
        "flags": (torch.tensor([True, False]), torch.empty(0, dtype=torch.int64)),
        "note": "text",
    }


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in _tensors(v)]
    return []


def _assert_bitwise_copy(src: Any, dst: Any) -> None:
    a, b = _tensors(src), _tensors(dst)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert y.device.type == "cpu" and x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x.cpu(), y)
        if x.numel():
            assert x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    assert type(dst["models_state_dict"][0]) is collections.OrderedDict
    assert dst["note"] == "text" and dst["optimizers_state_dict"][0]["lr"] == 0.1


def _ptrs(obj: Any) -> list[int]:
    return [t.untyped_storage().data_ptr() for t in _tensors(obj) if t.numel()]


def test_same_shapes_reuse_the_buffers_and_hold_the_new_values() -> None:
    staging = HostStaging()
    first, release = staging.copy(_state(1.0))
    _assert_bitwise_copy(_state(1.0), first)
    held = staging.nbytes()
    assert held > 0
    release()
    second, release = staging.copy(_state(2.0))
    _assert_bitwise_copy(_state(2.0), second)
    assert _ptrs(second) == _ptrs(first)  # no new memory
    assert staging.nbytes() == held
    release()


def test_changed_shapes_get_new_buffers_and_a_smaller_state_frees_the_rest() -> None:
    staging = HostStaging()
    first, release = staging.copy(_state(rows=4))
    release()
    grown, release = staging.copy(_state(rows=9))
    _assert_bitwise_copy(_state(rows=9), grown)
    assert _ptrs(grown)[0] != _ptrs(first)[0] and _ptrs(grown)[1:] == _ptrs(first)[1:]
    release()
    before = staging.nbytes()
    small, release = staging.copy({"only": torch.ones(2)})
    assert torch.equal(small["only"], torch.ones(2))
    assert staging.nbytes() == 8 < before
    release()


def test_buffers_still_being_written_are_never_overwritten(caplog: Any) -> None:
    """Until release(), a second copy goes to new memory: the first copy keeps its values."""
    staging = HostStaging()
    first, release_first = staging.copy(_state(1.0))
    with caplog.at_level(logging.WARNING, logger="determined.pytorch"):
        second, release_second = staging.copy(_state(3.0))
    assert "still in use" in caplog.text
    _assert_bitwise_copy(_state(1.0), first)
    _assert_bitwise_copy(_state(3.0), second)
    assert not set(_ptrs(first)) & set(_ptrs(second))
    release_second()  # releases nothing: the second copy did not take the kept buffers
    third, release_third = staging.copy(_state(4.0))
    assert not set(_ptrs(first)) & set(_ptrs(third))
    _assert_bitwise_copy(_state(1.0), first)
    release_first()
    release_first()  # a second call is harmless
    release_third()
    fourth, _ = staging.copy(_state(5.0))
    assert _ptrs(fourth) == _ptrs(first)


def test_close_drops_the_buffers() -> None:
    staging = HostStaging()
    kept, release = staging.copy(_state())
    release()
    staging.close()
    assert staging.nbytes() == 0
    later, _ = staging.copy(_state(2.0))
    _assert_bitwise_copy(_state(2.0), later)
    assert torch.equal(kept["models_state_dict"][0]["w"], _state()["models_state_dict"][0]["w"])


def test_a_failed_copy_frees_the_buffers_for_the_next() -> None:
    class Unpicklable:
        def __deepcopy__(self, memo: Any) -> Any:
            raise RuntimeError("cannot copy (test)")

    staging = HostStaging()
    with pytest.raises(RuntimeError, match="cannot copy"):
        staging.copy({"w": torch.ones(3), "x": Unpicklable()})
    out, _ = staging.copy({"w": torch.zeros(3)})
    assert torch.equal(out["w"], torch.zeros(3))


def test_host_copy_copies_into_new_memory() -> None:
    src = _state()
    _assert_bitwise_copy(src, host_copy(src))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_state_is_staged_into_pinned_memory_bitwise() -> None:
    """From the GPU: pinned buffers, asynchronous copies waited for before copy() returns
    (a 64 MB tensor is still in flight otherwise), the same buffers the second time."""
    staging = HostStaging()
    ptrs: list[list[int]] = []
    for scale in (1.0, -2.0):
        src = _state(scale)
        on_gpu = {
            **src,
            "models_state_dict": [{k: v.cuda() for k, v in src["models_state_dict"][0].items()}],
            "big": torch.full((16 << 20,), scale, device="cuda"),
        }
        out, release = staging.copy(on_gpu)
        for t in _tensors(out["models_state_dict"]) + [out["big"]]:
            assert t.device.type == "cpu" and t.is_pinned()
        for a, b in zip(
            _tensors(src["models_state_dict"]), _tensors(out["models_state_dict"]), strict=True
        ):
            assert torch.equal(a, b)
        assert bool((out["big"] == scale).all())
        ptrs.append(_ptrs(out))
        release()
    assert ptrs[0] == ptrs[1]


def test_a_series_of_states_each_staged_bitwise_with_kept_buffers() -> None:
    """Property: over any series of states (tensors whose count, shapes, strides and dtypes
    change or stay), each copy through one HostStaging equals its source bitwise, shares no
    storage with it, and keeps its values until released; the buffers are reused whenever a
    tensor's layout is the same as the one before it at that position."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    dtypes = st.sampled_from([torch.float32, torch.float16, torch.int64, torch.bool])
    shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)

    def make(dtype: torch.dtype, shape: tuple[int, ...], transpose: bool, seed: int) -> Any:
        t = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 10).to(dtype)
        return t.t() if transpose and t.dim() == 2 else t

    tensor = st.builds(make, dtypes, shapes, st.booleans(), st.integers(0, 1000))
    states = st.lists(st.lists(tensor, max_size=5), min_size=1, max_size=4)

    @settings(max_examples=60, deadline=None)
    @given(states)
    def check(series: list[list[torch.Tensor]]) -> None:
        staging = HostStaging()
        before: list[tuple[Any, torch.Tensor]] = []  # (source layout, buffer) by position
        for state in series:
            expected = [t.clone() for t in state]
            out, release = staging.copy({"s": state})
            for i, (src, got) in enumerate(zip(expected, out["s"], strict=True)):
                assert got.dtype == src.dtype and torch.equal(got, src)
                layout = (src.shape, src.stride(), src.dtype)
                if i < len(before) and before[i][0] == layout and src.numel():
                    kept = before[i][1].untyped_storage().data_ptr()
                    assert got.untyped_storage().data_ptr() == kept
            assert not set(_ptrs(state)) & set(_ptrs(out))
            before = [
                ((t.shape, t.stride(), t.dtype), b) for t, b in zip(state, out["s"], strict=True)
            ]
            release()

    check()
