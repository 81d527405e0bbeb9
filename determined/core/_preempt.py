"""Preemption: should this task checkpoint and exit now?

``PreemptContext`` holds the rank logic (which ranks ask, who broadcasts). Where the signal comes
from is a watcher: the master's long-poll endpoint on a cluster, or SIGTERM/SIGINT locally, so a
local job can checkpoint and exit cleanly on Ctrl-C or a batch scheduler's SIGTERM.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any, Protocol

from determined.common.api import Session, _routes

logger = logging.getLogger("determined.core")


class PreemptMode(enum.Enum):
    """Which ranks may call ``should_preempt()`` and how they agree.

    ``WorkersAskChief`` (default): every rank calls in step and the chief broadcasts its answer.
    ``ChiefOnly``: only the chief may call. ``WorkersAskMaster``: each rank watches on its own.
    """

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class _Watcher(Protocol):
    def start(self) -> None: ...

    def close(self) -> None: ...

    def should_preempt(self) -> bool: ...

    def acknowledge(self) -> None: ...


class _NeverPreempted:
    """The watcher of tasks that are never preempted: cluster tasks other than trials."""

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def should_preempt(self) -> bool:
        return False

    def acknowledge(self) -> None:
        pass


class _MasterWatcher:
    """Long-polls the master's preemption signal in a daemon thread.

    The first poll uses timeout 0 so ``should_preempt()`` answers quickly; later polls wait up to
    60 s each. Errors are logged and retried after 10 s: a master that is briefly away must not
    kill training.
    """

    _LONG_POLL_S = 60
    _RETRY_S = 10.0

    def __init__(self, session: Session, allocation_id: str) -> None:
        self._session = session
        self._allocation_id = allocation_id
        self._preempt: bool | None = None
        self._quit = threading.Event()
        self._answered = threading.Event()
        self._thread = threading.Thread(target=self._run, name="preemption-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        # The thread may be inside a blocking HTTP read; it is a daemon and exits on its own.
        self._quit.set()

    def should_preempt(self) -> bool:
        self._answered.wait()
        return bool(self._preempt)

    def acknowledge(self) -> None:
        _routes.ack_preemption(self._session, self._allocation_id)

    def _poll(self, timeout_s: int) -> bool:
        return _routes.poll_preemption(self._session, self._allocation_id, timeout_s)

    def _run(self) -> None:
        try:
            self._preempt = self._poll(0)
        except Exception:
            logger.warning("first preemption check failed (continuing)", exc_info=True)
            self._preempt = False
        finally:
            self._answered.set()
        while not self._preempt and not self._quit.is_set():
            try:
                self._preempt = self._poll(self._LONG_POLL_S)
            except Exception:
                logger.warning("preemption long poll failed (retrying)", exc_info=True)
                self._quit.wait(self._RETRY_S)


class _SignalWatcher:
    """Turns the first SIGTERM or SIGINT into a preemption request.

    A second SIGINT restores Python's default handling and interrupts at once, so Ctrl-C twice
    still kills a job that never checks ``should_preempt()``. Handlers can only be installed from
    the main thread; elsewhere this watcher never preempts. The previous handlers come back on
    ``close()``.
    """

    _SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, signals: tuple[int, ...] = _SIGNALS) -> None:
        self._signals = signals
        self._preempt = threading.Event()
        self._previous: dict[int, Any] = {}

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            logger.info("not on the main thread: local preemption by signal is disabled")
            return
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def should_preempt(self) -> bool:
        return self._preempt.is_set()

    def acknowledge(self) -> None:
        pass  # no master to tell: the signal came from this machine

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._preempt.is_set() and signum == signal.SIGINT:
            self.close()
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        logger.warning(
            f"received {name} (pid {os.getpid()}): preemption requested; the job should "
            "checkpoint and exit at its next should_preempt() check (Ctrl-C again to kill now)"
        )
        self._preempt.set()


def in_batch_job() -> bool:
    """Whether this process runs in a batch scheduler's job (Slurm sets ``SLURM_JOB_ID`` in
    every task): its SIGTERM (a time limit, ``scancel``, Slurm's own preemption) is then a
    request to checkpoint and exit, not a kill."""
    return bool(os.environ.get("SLURM_JOB_ID"))


class _MasterAndSignal:
    """A cluster trial inside a batch job: the master's long poll, or the scheduler's
    SIGTERM. The acknowledgement goes to the master, so the run is resumed later (a new job)
    instead of being read as finished."""

    def __init__(self, master: _Watcher) -> None:
        self._master = master
        self._signal = _SignalWatcher((signal.SIGTERM,))

    def start(self) -> None:
        self._signal.start()
        self._master.start()

    def close(self) -> None:
        self._signal.close()
        self._master.close()

    def should_preempt(self) -> bool:
        return self._signal.should_preempt() or self._master.should_preempt()

    def acknowledge(self) -> None:
        self._master.acknowledge()


class _DeferSigterm:
    """A non-chief rank inside a batch job: the scheduler's SIGTERM reaches every rank, but
    only the chief decides (it broadcasts at ``should_preempt()``); dying at once would leave
    the chief's checkpoint waiting for this rank."""

    def __init__(self) -> None:
        self._previous: Any = None

    def start(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)

    def close(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    @staticmethod
    def _on_signal(signum: int, frame: FrameType | None) -> None:
        logger.warning(f"received SIGTERM (pid {os.getpid()}): the chief decides when to stop")


class _Broadcaster(Protocol):
    def get_rank(self) -> int: ...

    def broadcast(self, stuff: Any) -> Any: ...


class PreemptContext:
    """Ask whether the task should checkpoint and exit (pause, cluster preemption, Ctrl-C).

    ``should_preempt()`` is cheap after the first answer; in ``WorkersAskChief`` mode it is a
    collective (every rank must call it in step).
    """

    def __init__(
        self,
        watcher_factory: Any,
        dist: _Broadcaster,
        preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
        *,
        defer_sigterm: bool = False,
    ) -> None:
        self._dist = dist
        self._mode = PreemptMode(preempt_mode)
        watches = dist.get_rank() == 0 or self._mode == PreemptMode.WorkersAskMaster
        self._watcher: _Watcher | None = watcher_factory() if watches else None
        # Inside a batch job: SIGTERM on the ranks that do not watch waits for the chief.
        self._deferred = _DeferSigterm() if defer_sigterm and self._watcher is None else None
        self._started = False
        self._ack_sent = False

    def start(self) -> PreemptContext:
        """Start watching. Called by ``core.Context.__enter__``; a second call raises."""
        if self._started:
            raise RuntimeError("PreemptContext.start() may only be called once")
        self._started = True
        if self._watcher is not None:
            self._watcher.start()
        elif self._deferred is not None:
            self._deferred.start()
        return self

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
        if self._deferred is not None:
            self._deferred.close()

    def __enter__(self) -> PreemptContext:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.close()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True when the task should save its state and exit.

        Blocks only until the first answer is known. With ``auto_ack`` the first True also tells
        the master that the signal was received (so a clean exit is read as "paused", not
        "finished"). Raises RuntimeError before ``start()`` and on a worker in ChiefOnly mode.
        """
        if not self._started:
            raise RuntimeError(
                "PreemptContext.should_preempt() called before start(); use the context "
                "inside `with core.init() as core_context:`"
            )
        if self._watcher is None:
            if self._mode == PreemptMode.ChiefOnly:
                raise RuntimeError(
                    "preempt_mode=ChiefOnly but should_preempt() was called on rank "
                    f"{self._dist.get_rank()}; call it on the chief only, or use WorkersAskChief"
                )
            return bool(self._dist.broadcast(None))
        out = self._watcher.should_preempt()
        if out and auto_ack and not self._ack_sent:
            # Only this automatic acknowledgement is sent once; an explicit
            # acknowledge_preemption_signal() does not count (as in the reference).
            self._ack_sent = True
            self.acknowledge_preemption_signal()
        if self._mode == PreemptMode.WorkersAskChief:
            self._dist.broadcast(out)
        return out

    def acknowledge_preemption_signal(self) -> None:
        """Tell the master this task is exiting because of the preemption and expects to be
        resumed later."""
        if self._watcher is not None:
            self._watcher.acknowledge()


class DummyPreemptContext(PreemptContext):
    """A PreemptContext that is never preempted (keeps the rank checks and broadcasts)."""

    def __init__(
        self, dist: _Broadcaster, preempt_mode: PreemptMode = PreemptMode.WorkersAskChief
    ) -> None:
        super().__init__(_NeverPreempted, dist, preempt_mode)
