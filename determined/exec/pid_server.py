"""``python -m determined.exec.pid_server [options] SOCKET NUM_WORKERS -- CMD...``

Runs CMD (a launcher such as torchrun) and watches the NUM_WORKERS worker processes it starts,
each wrapped in :mod:`determined.exec.pid_client`, which connect to the unix socket SOCKET. A
worker says ``<pid>\\n`` when it starts, ``k`` now and then, and ``q`` when it ends well. A worker
whose connection closes without ``q`` has failed: after ``--grace-period`` seconds (so its own
error reaches the logs first) CMD gets ``--on-fail`` (SIGTERM by default), which in turn stops the
other workers. That way one dead rank never leaves the others waiting forever in a collective.

Exit code: CMD's code; or 79 when a worker failed but CMD exited 0, and 77 when CMD exited 0
before every worker had finished well.
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

from determined.launch import _signals

EXIT_CHILD_EARLY = 77
EXIT_WORKER_FAILED = 79


class _Watch:
    """The workers' connections and what each has said."""

    def __init__(self, listener: socket.socket, expected: int) -> None:
        self.expected = expected
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ, data=None)
        self.finished = 0
        self.failed: list[str] = []

    def poll(self, timeout: float) -> None:
        for key, _ in self.sel.select(timeout):
            if key.data is None:
                conn, _addr = key.fileobj.accept()  # type: ignore[union-attr]
                self.sel.register(conn, selectors.EVENT_READ, data={"pid": "?", "quit": False})
            else:
                self._read(key)

    def _read(self, key: selectors.SelectorKey) -> None:
        conn: socket.socket = key.fileobj  # type: ignore[assignment]
        state = key.data
        data = conn.recv(4096)
        if data:
            text = data.decode(errors="replace")
            if state["pid"] == "?" and "\n" in text:
                state["pid"], text = text.split("\n", 1)
            state["quit"] = state["quit"] or "q" in text
            return
        self.sel.unregister(conn)
        conn.close()
        if state["quit"]:
            self.finished += 1
        else:
            self.failed.append(state["pid"])

    @property
    def all_finished(self) -> bool:
        return self.finished >= self.expected


def run(
    socket_path: str,
    workers: int,
    cmd: list[str],
    on_fail: str = "SIGTERM",
    grace_period: float = 3.0,
) -> int:
    """Run ``cmd`` and watch ``workers`` clients on ``socket_path``; the exit code."""
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(max(workers, 1))
    watch = _Watch(listener, workers)
    proc = subprocess.Popen(cmd)
    _signals.forward_to(proc)
    try:
        while proc.poll() is None and not watch.failed:
            watch.poll(0.2)
        if watch.failed and proc.poll() is None:
            print(
                f"pid_server: worker {', '.join(watch.failed)} exited without finishing; "
                f"stopping the others in {grace_period:g}s",
                file=sys.stderr,
            )
            deadline = time.monotonic() + grace_period
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.poll() is None and on_fail != "WAIT":
                proc.send_signal(getattr(signal, on_fail))
        code = _signals.exit_code(proc.wait())
        while not watch.all_finished and not watch.failed and watch.sel.get_map():
            # Connections closed by the workers' exit may still be unread.
            before = (watch.finished, len(watch.failed))
            watch.poll(0.05)
            if (watch.finished, len(watch.failed)) == before:
                break
    finally:
        listener.close()
        if os.path.exists(socket_path):
            os.unlink(socket_path)
    if code == 0 and watch.failed:
        return EXIT_WORKER_FAILED
    if code == 0 and not watch.all_finished:
        return EXIT_CHILD_EARLY
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m determined.exec.pid_server")
    parser.add_argument("--on-fail", default="SIGTERM", choices=["SIGTERM", "SIGKILL", "WAIT"])
    parser.add_argument("--on-exit", default="WAIT", choices=["WAIT"])
    parser.add_argument("--grace-period", type=float, default=3.0)
    parser.add_argument("socket")
    parser.add_argument("workers", type=int)
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no CMD to run")
    return run(args.socket, args.workers, cmd, args.on_fail, args.grace_period)


if __name__ == "__main__":
    sys.exit(main())
