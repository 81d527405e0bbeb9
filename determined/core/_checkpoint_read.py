"""Reading a checkpoint with the processes of one machine sharing a single fetch
(``DownloadMode.LocalWorkersShareDownload``), in the reference's collective protocol:

1. ``allgather(selector is not None)`` over all ranks;
2. if any rank has a selector, the local chief broadcasts each candidate path on the node
   channel and fetches it when ``any(gather_local(selector(path)))``;
3. ``broadcast_local(None)``: the fetch is done; then (restore_path only)
   ``broadcast_local(path)``, every rank uses the files, and ``gather_local(None)`` waits for all
   before cleanup.

Unlike the reference, a fetch that fails on the local chief (a missing or corrupted checkpoint)
is broadcast to its workers, which raise the same error instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import enum
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

from determined.common import storage
from determined.core._distributed import DistributedContext

Selector = Callable[[str], bool]


class DownloadMode(enum.Enum):
    """How ``download()`` and ``restore_path()`` coordinate the processes of a trial.

    ``LocalWorkersShareDownload`` (default): a collective; every process calls it, the first
    process of each machine fetches once and the others share its files.
    ``NoSharedDownload``: no coordination; each caller fetches on its own.
    """

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _chief_selector(dist: DistributedContext, selector: Selector | None) -> Selector:
    def select(path: str) -> bool:
        dist.broadcast_local(path)
        answers = dist.gather_local(selector(path) if selector is not None else True)
        return any(answers or [True])

    return select


def _answer_until_done(dist: DistributedContext, selector: Selector | None) -> None:
    """A non-chief's side of steps 2 and 3: answer selector queries until the chief is done."""
    while True:
        msg: Any = dist.broadcast_local(None)
        if msg is None:
            return
        if isinstance(msg, _Failed):
            raise msg.error
        dist.gather_local(selector(msg) if selector is not None else True)


@contextlib.contextmanager
def shared_restore(
    dist: DistributedContext,
    sm: storage.StorageManager,
    storage_id: str,
    selector: Selector | None,
) -> Iterator[pathlib.Path]:
    want_filter = any(dist.allgather(selector is not None))
    if dist.get_local_rank() != 0:
        _answer_until_done(dist, selector)
        path = dist.broadcast_local(None)
        try:
            yield path
        finally:
            dist.gather_local(None)
        return
    with contextlib.ExitStack() as stack:
        try:
            sel = _chief_selector(dist, selector) if want_filter else None
            path = stack.enter_context(sm.restore_path(storage_id, sel))
        except BaseException as e:
            dist.broadcast_local(_Failed(e))
            raise
        dist.broadcast_local(None)
        dist.broadcast_local(path)
        try:
            yield path
        finally:
            dist.gather_local(None)


def shared_download(
    dist: DistributedContext,
    sm: storage.StorageManager,
    storage_id: str,
    dst: str | os.PathLike[str],
    selector: Selector | None,
) -> None:
    want_filter = any(dist.allgather(selector is not None))
    if dist.get_local_rank() != 0:
        _answer_until_done(dist, selector)
        return
    try:
        sel = _chief_selector(dist, selector) if want_filter else None
        sm.download(storage_id, dst, sel)
    except BaseException as e:
        dist.broadcast_local(_Failed(e))
        raise
    dist.broadcast_local(None)
