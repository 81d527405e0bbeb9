"""The master daemon of this machine's data dir: finding it, starting it, stopping it.

``det master up`` (and ``det e create`` when no master answers) starts ``python -m
determined.master`` as a detached process (its own session, stdin closed, output appended to
``<data dir>/master.log``) and writes ``master.pid`` and ``master.port`` next to its database.
Other commands use that master when neither ``-m`` nor ``DET_MASTER`` names one.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import psutil
import requests

from determined.cli import _render
from determined.common import _paths

PID_FILE = "master.pid"
PORT_FILE = "master.port"
LOG_FILE = "master.log"
# The database `det master up --db-url` (or `det master migrate-store`) chose, remembered so a
# later plain `det master up` never opens a new, empty SQLite file instead (0600: a URL may
# carry a password).
DB_URL_FILE = "master.db_url"
DEFAULT_PORT = 8080


@dataclasses.dataclass(frozen=True)
class LocalMaster:
    """A master started by ``det master up`` from ``data_dir``."""

    data_dir: pathlib.Path
    pid: int
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _alive(pid: int) -> bool:
    """True for a live (non-zombie) process that runs ``determined.master``."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return any("determined.master" in part for part in proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _read_int(path: pathlib.Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def forget(data_dir: pathlib.Path) -> None:
    """Remove the pid and port files of a master that no longer runs."""
    for name in (PID_FILE, PORT_FILE):
        (data_dir / name).unlink(missing_ok=True)


def running(data_dir: pathlib.Path | None = None) -> LocalMaster | None:
    """The master started from ``data_dir`` (default: the data dir), if it still runs."""
    data_dir = data_dir or _paths.data_dir()
    pid = _read_int(data_dir / PID_FILE)
    port = _read_int(data_dir / PORT_FILE)
    if pid is None or port is None or not _alive(pid):
        return None
    return LocalMaster(data_dir, pid, port)


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether a master answers ``GET /info`` at ``url``."""
    try:
        return requests.get(url.rstrip("/") + "/info", timeout=timeout).ok
    except requests.RequestException:
        return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``host:port`` now (nothing else has it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(first: int = DEFAULT_PORT, tries: int = 20) -> int:
    """``first`` if it is free, else the next free one of the ``tries`` after it, else any
    free port (the kernel's pick)."""
    for port in range(first, first + tries + 1):
        if port_free(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(path: pathlib.Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(
    port: int = DEFAULT_PORT,
    *,
    cpu_slots: int | None = None,
    db_url: str | None = None,
    host: str | None = None,
    config_file: pathlib.Path | None = None,
    timeout: float = 60.0,
) -> LocalMaster:
    """Start a master daemon from the data dir and wait until it answers ``/info``;
    ``config_file``: a master config YAML (the options given here win over it).

    Raises:
        CliError: one runs already, the port is taken, or the master exited or never answered
            (the message carries the end of its log).
    """
    data_dir = _paths.data_dir().expanduser().resolve()
    current = running(data_dir)
    if current is not None:
        raise _render.CliError(
            f"a master from {data_dir} is already running at {current.url} (pid {current.pid}); "
            "stop it with `det master down`"
        )
    url = f"http://127.0.0.1:{port}"
    if answers(url):
        raise _render.CliError(
            f"port {port} is in use by another master (not the one of {data_dir}); choose "
            f"another port with `det master up --port N`, or point -m/DET_MASTER at {url}"
        )
    if not port_free(port, host or "127.0.0.1"):
        raise _render.CliError(
            f"port {port} is in use by another program; choose another port with "
            "`det master up --port N`"
        )
    # Private, as the master makes it (it holds the database, logs and work dirs); det's own
    # logins may have made it already.
    data_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
    if data_dir.stat().st_uid == os.geteuid():
        data_dir.chmod(0o700)  # mkdir's mode is masked by the umask
    if db_url:
        remember_db_url(data_dir, db_url)
    else:
        db_url = remembered_db_url(data_dir)
    cmd = [sys.executable, "-m", "determined.master", "--port", str(port)]
    cmd += ["--data-dir", str(data_dir)]
    if cpu_slots is not None:
        cmd += ["--cpu-slots", str(cpu_slots)]
    if db_url:
        cmd += ["--db-url", db_url]
    if host:
        cmd += ["--host", host]  # the master refuses non-loopback ones with blank passwords
    if config_file is not None:
        cmd += ["--config-file", str(config_file.expanduser().resolve())]
    env = dict(os.environ, DET_HOME=str(data_dir))
    env.pop("DET_MASTER", None)
    log_path = data_dir / LOG_FILE
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # survives the terminal that ran `det master up`
            close_fds=True,
        )
    _write_private(data_dir / PID_FILE, f"{proc.pid}\n")
    _write_private(data_dir / PORT_FILE, f"{port}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            forget(data_dir)
            raise _render.CliError(
                f"the master exited with status {proc.returncode}; the end of {log_path}:\n"
                + _log_tail(log_path)
            )
        if answers(url, timeout=0.5):
            return LocalMaster(data_dir, proc.pid, port)
        time.sleep(0.1)
    proc.kill()
    proc.wait(10)
    forget(data_dir)
    raise _render.CliError(f"the master did not answer within {timeout:.0f}s; see {log_path}")


def _write_private(path: pathlib.Path, text: str) -> None:
    """``text`` into ``path``, a file only its owner reads (0600 when it is created)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def remember_db_url(data_dir: pathlib.Path, db_url: str) -> None:
    _write_private(data_dir / DB_URL_FILE, db_url + "\n")


def remembered_db_url(data_dir: pathlib.Path) -> str | None:
    """The database this data dir's master uses when it is not SQLite in the data dir."""
    try:
        return (data_dir / DB_URL_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def stop(master: LocalMaster, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; remove the pid and port files."""
    try:
        os.kill(master.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while _alive(master.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(master.pid):
        try:
            os.kill(master.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # Gone before we say so: a killed process lingers until the kernel has torn it down.
        deadline = time.monotonic() + 5.0
        while _alive(master.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    forget(master.data_dir)
