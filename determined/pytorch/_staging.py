"""Host copies of a checkpoint's state for asynchronous checkpoints ("staging").

Staging is the only part of an asynchronous checkpoint that blocks training, so its copies go
into host buffers kept from one checkpoint to the next (:class:`HostStaging`): only the first
checkpoint pays for new memory (page faults cost about as much as the copy itself), and state on
a CUDA device is copied into pinned memory with asynchronous copies and one synchronize per
device, which is how a device-to-host copy runs at full speed.
"""

from __future__ import annotations

import collections
import copy
import logging
import threading
from collections.abc import Callable
from typing import Any

import torch

logger = logging.getLogger("determined.pytorch")

Take = Callable[[torch.Tensor], torch.Tensor]


def host_copy(obj: Any) -> Any:
    """A copy of ``obj`` that shares no tensor storage with it: tensors are copied to new host
    memory; dicts, lists and tuples are rebuilt; anything else is deep-copied."""
    return _walk(obj, lambda t: t.detach().to("cpu", copy=True))


def _walk(obj: Any, take: Take) -> Any:
    """``obj`` rebuilt with ``take(tensor)`` for each tensor, in a fixed (depth-first) order."""
    if isinstance(obj, torch.Tensor):
        return take(obj)
    if type(obj) in (dict, collections.OrderedDict):
        return type(obj)((k, _walk(v, take)) for k, v in obj.items())
    if type(obj) is list:
        return [_walk(v, take) for v in obj]
    if type(obj) is tuple:
        return tuple(_walk(v, take) for v in obj)
    if isinstance(obj, int | float | str | bool | type(None)):
        return obj
    return copy.deepcopy(obj)


def _plain(t: torch.Tensor) -> bool:
    """Whether ``t`` is a dense tensor a kept buffer can take (not sparse, quantized, meta, or
    a subclass such as DTensor, which are copied the ordinary way)."""
    return (
        type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.layout == torch.strided
        and not t.is_quantized
        and t.device.type != "meta"
    )


class HostStaging:
    """Host buffers for staging, kept between checkpoints: one set per training loop, freed by
    :meth:`close`.

    :meth:`copy` copies a state into the buffers (same shapes, strides and dtypes as last time:
    the same buffers; otherwise new ones, which are then kept) and hands back a ``release``
    to call once the copy has been written. Until then the buffers are in use, and a further
    ``copy`` goes to new memory instead of overwriting what is still being written (the loop
    already waits for the previous checkpoint; this makes reuse safe on its own).
    """

    def __init__(self) -> None:
        self._buffers: list[tuple[tuple[Any, ...], torch.Tensor]] = []
        self._lock = threading.Lock()
        self._in_use = False
        self._closed = False

    def copy(self, obj: Any) -> tuple[Any, Callable[[], None]]:
        """``(host copy of obj, release)``; ``release`` may be called from any thread, once or
        more. The copy shares no storage with ``obj``."""
        with self._lock:
            owned = not self._in_use and not self._closed
            if owned:
                self._in_use = True
        if not owned:
            if not self._closed:
                logger.warning("staging buffers still in use: staging into new host memory")
            devices: set[torch.device] = set()
            out = _walk(obj, lambda t: _to_host_async(t, devices))
            _synchronize(devices)
            return out, no_release
        try:
            out = self._copy_into_kept(obj)
        except BaseException:
            self._release()
            raise
        return out, self._release_once()

    def _copy_into_kept(self, obj: Any) -> Any:
        used = 0
        devices: set[torch.device] = set()

        def take(t: torch.Tensor) -> torch.Tensor:
            nonlocal used
            if not _plain(t):
                return t.detach().to("cpu", copy=True)
            key = (t.shape, t.stride(), t.dtype, t.is_cuda)
            if used < len(self._buffers) and self._buffers[used][0] == key:
                buf = self._buffers[used][1]
            else:
                buf = torch.empty_like(t, device="cpu", pin_memory=t.is_cuda)
                if used < len(self._buffers):
                    self._buffers[used] = (key, buf)
                else:
                    self._buffers.append((key, buf))
            used += 1
            if t.is_cuda:
                devices.add(t.device)
            return buf.copy_(t.detach(), non_blocking=t.is_cuda)

        out = _walk(obj, take)
        del self._buffers[used:]  # a state that shrank keeps no buffers it no longer needs
        _synchronize(devices)
        return out

    def _release_once(self) -> Callable[[], None]:
        done = threading.Event()

        def release() -> None:
            if not done.is_set():
                done.set()
                self._release()

        return release

    def _release(self) -> None:
        with self._lock:
            self._in_use = False

    def nbytes(self) -> int:
        """Host memory the kept buffers hold."""
        return sum(b.untyped_storage().nbytes() for _, b in self._buffers)

    def close(self) -> None:
        """Drop the kept buffers (a write still running holds its own references to what it
        writes); later copies go to new memory."""
        with self._lock:
            self._closed = True
            self._buffers = []


def _to_host_async(t: torch.Tensor, devices: set[torch.device]) -> torch.Tensor:
    """A new host copy of ``t``: pinned and asynchronous from CUDA (its device is added to
    ``devices``, to synchronize after the walk), a plain copy otherwise."""
    if t.is_cuda and _plain(t):
        devices.add(t.device)
        buf = torch.empty_like(t, device="cpu", pin_memory=True)
        return buf.copy_(t.detach(), non_blocking=True)
    return t.detach().to("cpu", copy=True)


def _synchronize(devices: set[torch.device]) -> None:
    """Wait for the asynchronous device-to-host copies issued on ``devices`` (CUDA only: only
    those have asynchronous copies here), so that the host buffers hold the values."""
    for device in devices:
        torch.cuda.synchronize(device)


def no_release() -> None:
    """The release of host memory that no kept buffer backs: nothing to give back."""
