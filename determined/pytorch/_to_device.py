"""Moving batches to a device (``to_device``) and measuring them (``data_length``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import torch

logger = logging.getLogger("determined.pytorch")

_Array = Union[np.ndarray, torch.Tensor]
_Data = Union[dict[str, _Array], Sequence[_Array], _Array]
TorchData = Union[dict[str, torch.Tensor], Sequence[torch.Tensor], torch.Tensor]
"""A batch after :func:`to_device`: tensors, or lists/tuples/dicts of them."""

# numpy dtype kinds torch can hold: floating, complex, signed, unsigned, bool.
_TENSOR_KINDS = frozenset("fciub")


def _is_namedtuple(data: Any) -> bool:
    return isinstance(data, tuple) and hasattr(type(data), "_fields")


def to_device(
    data: Any,
    device: torch.device | str,
    warned_types: set[type] | None = None,
    *,
    non_blocking: bool = False,
) -> Any:
    """Move a batch to ``device``, recursing through dicts, lists, tuples and namedtuples.

    Called by the training loop on every batch (on each rank, for that rank's device) and by
    user code through ``context.to_device``. Leaves are handled as follows:

    * ``torch.Tensor`` and any object with a callable ``to`` (a model output class, a
      ``BatchEncoding``...): ``leaf.to(device)``;
    * a numeric ``numpy.ndarray`` (float, complex, int, uint, bool): converted with
      ``torch.from_numpy`` (sharing memory) and moved;
    * anything else (strings, ``None``, object arrays...): returned unchanged, with one warning
      per type per call, or per ``warned_types`` set when the caller passes one to share.

    Containers are rebuilt with the same type for namedtuples and for dict subclasses that can
    be built from a dict (Determined 0.37 turns both into plain tuples and dicts). Mappings that
    are not dicts but have ``.to`` (such as HuggingFace's ``BatchEncoding``) use their ``.to``.
    Blocks only as long as ``Tensor.to`` does; pass ``non_blocking=True`` to overlap copies
    from pinned memory.
    """
    if warned_types is None:
        warned_types = set()
    return _move(data, device, warned_types, non_blocking)


def batch_mover(device: torch.device, warned_types: set[type]) -> Callable[[Any], Any]:
    """The function the training loop moves every batch with: ``to_device`` to ``device``,
    except that on a CPU device, CPU tensors and plain lists, tuples and dicts of them come
    back as they are, unlooked-at by ``Tensor.to`` (which would return the same tensors, at a
    microsecond or more per tensor on a small model's batch)."""

    def move(data: Any) -> Any:
        return _move(data, device, warned_types, False)

    if device.type != "cpu":
        return move

    def move_to_cpu(data: Any) -> Any:
        kind = type(data)
        if kind is list or kind is tuple:
            for d in data:
                if type(d) is not torch.Tensor or not d.is_cpu:
                    return move(data)
            return data
        if kind is dict:
            for d in data.values():
                if type(d) is not torch.Tensor or not d.is_cpu:
                    return move(data)
            return data
        if kind is torch.Tensor and data.is_cpu:
            return data
        return move(data)

    return move_to_cpu


def _move(data: Any, device: Any, warned_types: set[type], non_blocking: bool) -> Any:
    # Runs on every batch: exact-type checks first (a plain tuple or list of tensors is the
    # common batch), positional arguments only; a 2-tuple of tensors costs ~1.5 us, not ~6.
    kind = type(data)
    if kind is torch.Tensor:
        return data.to(device, non_blocking=non_blocking)
    if kind is tuple or kind is list:
        items = [
            d.to(device, non_blocking=non_blocking)
            if type(d) is torch.Tensor
            else _move(d, device, warned_types, non_blocking)
            for d in data
        ]
        return items if kind is list else tuple(items)
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, dict):
        moved = {k: _move(v, device, warned_types, non_blocking) for k, v in data.items()}
        return _rebuild_mapping(data, moved)
    if isinstance(data, list):
        return [_move(d, device, warned_types, non_blocking) for d in data]
    if isinstance(data, tuple):
        items = [_move(d, device, warned_types, non_blocking) for d in data]
        return type(data)(*items) if _is_namedtuple(data) else tuple(items)
    if isinstance(data, np.ndarray):
        if data.dtype.kind in _TENSOR_KINDS:
            return torch.from_numpy(data).to(device, non_blocking=non_blocking)
    elif callable(getattr(data, "to", None)):
        return data.to(device)
    if type(data) not in warned_types:
        warned_types.add(type(data))
        logger.warning(
            f"to_device: left a {type(data).__name__} where it was; only tensors, numeric numpy "
            "arrays, objects with a .to() method and lists/tuples/dicts of them can be moved."
        )
    return data


def _rebuild_mapping(original: dict[Any, Any], moved: dict[Any, Any]) -> Any:
    if type(original) is dict:
        return moved
    try:
        return type(original)(moved)
    except Exception:
        # Mappings that cannot be built from a dict (defaultdict, custom classes) become dicts.
        return moved


def data_length(data: _Data) -> int:
    """The batch size of ``data``: the length of its first array-like leaf.

    Called by the training loop when it needs records per batch (``records`` units,
    ``get_batch_length``). A tensor or ndarray gives its own ``len``; a dict, list or tuple gives
    the ``len`` of its first value (assuming every leaf is batched to the same length).

    Raises:
        ValueError: ``data`` is an empty dict, list or tuple.
        TypeError: ``data`` is of any other type; override ``get_batch_length`` in your trial
            to measure custom batch types.
    """
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return len(data)
    if isinstance(data, (dict, list, tuple)):
        if len(data) == 0:
            raise ValueError(
                f"cannot measure the batch size of an empty {type(data).__name__}: a batch needs "
                "at least one tensor or numpy array (or override get_batch_length in your trial)"
            )
        first = next(iter(data.values())) if isinstance(data, dict) else data[0]
        return len(first)
    raise TypeError(
        f"cannot measure the batch size of a {type(data).__name__}: data_length accepts a "
        "tensor, a numpy array, or a dict/list/tuple of them; override get_batch_length in your "
        "trial for other batch types"
    )
