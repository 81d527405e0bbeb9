"""``python -m determined.exec.pid_client SOCKET -- CMD...``

Runs one worker (CMD) under a :mod:`determined.exec.pid_server` listening on SOCKET: registers
this process, sends a keepalive every minute while CMD runs, and says ``q`` only when CMD exits 0,
so a failed worker is noticed and the rest of the trial is stopped. Exits with CMD's code.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

from determined.launch import _signals

KEEPALIVE_S = 60.0


def _connect(path: str, timeout: float = 30.0) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def run(socket_path: str, cmd: list[str]) -> int:
    sock = _connect(socket_path)
    sock.sendall(f"{os.getpid()}\n".encode())
    proc = subprocess.Popen(cmd)
    _signals.forward_to(proc)
    done = threading.Event()

    def keepalive() -> None:
        while not done.wait(KEEPALIVE_S):
            sock.sendall(b"k")

    threading.Thread(target=keepalive, daemon=True).start()
    code = proc.wait()
    done.set()
    if code == 0:
        sock.sendall(b"q")
    sock.close()
    return _signals.exit_code(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m determined.exec.pid_client")
    parser.add_argument("socket")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no CMD to run")
    return run(args.socket, cmd)


if __name__ == "__main__":
    sys.exit(main())
