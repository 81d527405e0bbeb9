"""pid_server / pid_client: one failed worker stops the rest (docs/reference/harness.md §16)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from determined.exec import pid_server

pytestmark = pytest.mark.e2e

PY = sys.executable


def _workers_cmd(sock: Path, scripts: list[str]) -> list[str]:
    # A tiny stand-in for torchrun: start one pid_client per script and wait for all of them.
    launcher = (
        "import signal, subprocess, sys\n"
        f"procs = [subprocess.Popen([{PY!r}, '-m', 'determined.exec.pid_client', {str(sock)!r}, "
        f"'--', {PY!r}, '-c', s]) for s in {scripts!r}]\n"
        "signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])\n"
        "sys.exit(max(p.wait() for p in procs))\n"
    )
    return [PY, "-c", launcher]


def _serve(tmp_path: Path, scripts: list[str], grace: float = 0.5) -> tuple[int, float]:
    sock = tmp_path / "pid.sock"
    cmd = [PY, "-m", "determined.exec.pid_server", "--grace-period", str(grace), str(sock)]
    cmd += [str(len(scripts)), "--", *_workers_cmd(sock, scripts)]
    started = time.monotonic()
    code = subprocess.run(cmd, timeout=120).returncode
    return code, time.monotonic() - started


def test_all_workers_finish_well(tmp_path: Path) -> None:
    code, _ = _serve(tmp_path, ["print('one')", "print('two')"])
    assert code == 0
    assert not (tmp_path / "pid.sock").exists()


def test_a_failed_worker_stops_a_hanging_one(tmp_path: Path) -> None:
    code, took = _serve(tmp_path, ["import sys; sys.exit(4)", "import time; time.sleep(120)"])
    assert code != 0
    assert took < 60  # the sleeping worker was stopped, not waited for


def test_launcher_exiting_0_before_the_workers_finish_is_77(tmp_path: Path) -> None:
    sock = tmp_path / "pid.sock"
    cmd = [PY, "-m", "determined.exec.pid_server", str(sock), "2", "--", PY, "-c", "pass"]
    assert subprocess.run(cmd, timeout=60).returncode == pid_server.EXIT_CHILD_EARLY


def test_launcher_exit_code_passes_through(tmp_path: Path) -> None:
    sock = tmp_path / "pid.sock"
    cmd = [PY, "-m", "determined.exec.pid_server", str(sock), "1", "--", PY, "-c", "exit(9)"]
    assert subprocess.run(cmd, timeout=60).returncode == 9
