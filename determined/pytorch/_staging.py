"""Host copies of a checkpoint's state for asynchronous checkpoints ("staging").

Staging is the only part of an asynchronous checkpoint that blocks training, so its copies go
into host buffers kept from one checkpoint to the next (:class:`HostStaging`): only the first
checkpoint pays for new memory (page faults cost about as much as the copy itself), and state on
a CUDA device is copied into pinned memory with asynchronous copies and one synchronize per
device, which is how a device-to-host copy runs at full speed.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

logger = logging.getLogger("determined.pytorch")

Take = Callable[[torch.Tensor], torch.Tensor]

# New staging memory may take at most this share of the host's available memory: beyond it a
# checkpoint is written from the live state instead (the loop waits), rather than risking the
# out-of-memory killer for a copy.
MAX_SHARE_OF_AVAILABLE = 0.5


class StagingTooLarge(Exception):
    """Staging would need more new host memory than :data:`MAX_SHARE_OF_AVAILABLE` of what the
    host has available; nothing was copied."""


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

    :meth:`copy` raises :class:`StagingTooLarge`, copying nothing, where the new memory it
    needs is more than :data:`MAX_SHARE_OF_AVAILABLE` of the host's available memory. It copies
    a state into the buffers (same shapes, strides and dtypes as last time:
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
            _check_fits(sum(_nbytes(t) for t in _tensors(obj)))
            if not self._closed:
                logger.warning("staging buffers still in use: staging into new host memory")
            devices: set[torch.device] = set()
            out = _walk(obj, lambda t: _to_host_async(t, devices))
            _synchronize(devices)
            return out, no_release
        try:
            _check_fits(self._new_bytes(obj))
            out = self._copy_into_kept(obj)
        except BaseException:
            self._release()
            raise
        return out, self._release_once()

    def _new_bytes(self, obj: Any) -> int:
        """Bytes of new host memory staging ``obj`` would allocate (tensors the kept buffers
        do not match), found without copying anything."""
        need = 0
        for used, t in enumerate(_tensors(obj)):
            kept = used < len(self._buffers) and self._buffers[used][0] == _key(t)
            if not kept or not _plain(t):
                need += _nbytes(t)
        return need

    def _copy_into_kept(self, obj: Any) -> Any:
        used = 0
        devices: set[torch.device] = set()

        def take(t: torch.Tensor) -> torch.Tensor:
            nonlocal used
            if not _plain(t):
                return t.detach().to("cpu", copy=True)
            key = _key(t)
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


def _key(t: torch.Tensor) -> tuple[Any, ...]:
    """What a kept buffer must match to take ``t``."""
    return (t.shape, t.stride(), t.dtype, t.is_cuda)


def _nbytes(t: torch.Tensor) -> int:
    return t.nelement() * t.element_size()


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors :func:`_walk` visits in ``obj``, in its order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif type(obj) in (dict, collections.OrderedDict):
        for v in obj.values():
            yield from _tensors(v)
    elif type(obj) in (list, tuple):
        for v in obj:
            yield from _tensors(v)


def available_host_memory() -> int | None:
    """Bytes of host memory available without swapping (Linux ``MemAvailable``), or None where
    that is not known."""
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def _check_fits(need: int) -> None:
    if need == 0:
        return
    available = available_host_memory()
    if available is not None and need > available * MAX_SHARE_OF_AVAILABLE:
        raise StagingTooLarge(
            f"staging the checkpoint needs {need / 2**20:.0f} MiB of new host memory, more than "
            f"{MAX_SHARE_OF_AVAILABLE:.0%} of the {available / 2**20:.0f} MiB available"
        )


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
