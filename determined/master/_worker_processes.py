"""How the master starts its worker processes (the read workers, the write worker) and ties
their lives to its own. No web code: a write worker imports only what its writes need."""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import threading

_PR_SET_PDEATHSIG = 1
# What a fork server imports once before it forks workers: the read functions' modules (the
# first fork server started also serves a write worker started again later).
_PRELOAD = ["determined.master.api"]


def start_context() -> multiprocessing.context.BaseContext:
    """How to start workers: forked from this process while it has one thread (the master
    starts them before its server's threads: cheap, and they share its imported modules),
    else from a fork server (a fork of a threaded process may inherit a lock another thread
    held), which imports the read functions' modules once (~1.5 s) before it forks them."""
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def die_with(master_pid: int) -> None:
    """End this worker when the master ends, even by SIGKILL (which runs no shutdown): the
    kernel signals a child whose parent died (Linux). A worker is a child of the master, or of
    the fork server, which ends with the master."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the master's own shutdown stops the pool
        return
    if master_pid and os.getppid() != master_pid:  # it died before the prctl
        os._exit(0)
