"""Signal forwarding shared by the launchers: each one runs a child and must pass on what it
receives, then exit with the child's code."""

from __future__ import annotations

import signal
import subprocess
from types import FrameType

FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)


def forward_to(proc: subprocess.Popen) -> None:
    """Pass every signal in :data:`FORWARDED` that this process receives on to ``proc``."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in FORWARDED:
        signal.signal(sig, handler)


def exit_code(returncode: int) -> int:
    """A shell-style exit code: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
