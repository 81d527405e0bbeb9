"""The network of a task with ``environment.proxy_ports`` in the sandbox (docs/security.md,
"Service ports"): the task has a network namespace of its own, so its ports answer nobody on
the host. This relay, the first process in that namespace, joins it to the master by unix
sockets only:

- ``--master PORT=SOCKET``: 127.0.0.1:PORT in the namespace (the task's ``DET_MASTER``) leads to
  the master's API through SOCKET;
- ``--serve PORT=SOCKET``: SOCKET (made here, 0600, in a directory only the master's user
  opens) leads to the task's 127.0.0.1:PORT; the master's proxy, which checks the owner's
  login, is its only client.

Then it runs the task's command and exits with its exit code. It ignores SIGTERM and SIGINT
(the task's process group gets them, and the relay must carry the task's last reports).
Standard library only: it runs as ``python -I`` on this file, untouched by the task's
``PYTHONPATH``.

    python -I _netrelay.py --master 8080=/path/api.sock --serve 8000=/path/8000.sock -- CMD ...
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

CHUNK = 64 * 1024
CONNECT_WAIT_S = 10.0


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s writing side."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _join(client: socket.socket, connect: Callable[[], socket.socket]) -> None:
    # The service may still be starting when the master's proxy comes (it waits as long for a
    # port on the host).
    deadline = time.monotonic() + CONNECT_WAIT_S
    while True:
        try:
            upstream = connect()
            break
        except OSError:
            if time.monotonic() >= deadline:
                client.close()  # nothing listens there: the caller sees the connection close
                return
            time.sleep(0.2)
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_join, args=(client, connect), daemon=True).start()


def tcp(port: int) -> Callable[[], socket.socket]:
    return lambda: socket.create_connection(("127.0.0.1", port))


def _unix(path: str) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            s.close()
            raise
        return s

    return connect


def _pairs(values: list[str]) -> list[tuple[int, str]]:
    out = []
    for value in values:
        port, _, path = value.partition("=")
        out.append((int(port), path))
    return out


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(
            "usage: _netrelay.py [--master PORT=SOCK] [--serve PORT=SOCK] ... -- CMD",
            file=sys.stderr,
        )
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    masters = _pairs([options[i + 1] for i, o in enumerate(options) if o == "--master"])
    served = _pairs([options[i + 1] for i, o in enumerate(options) if o == "--serve"])
    listeners = []
    for port, path in masters:
        inet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        inet.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        inet.bind(("127.0.0.1", port))
        inet.listen(64)
        listeners.append((inet, _unix(path)))
    old = os.umask(0o177)  # the service sockets: 0600
    try:
        for port, path in served:
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(path)
            unix.listen(64)
            listeners.append((unix, tcp(port)))
    finally:
        os.umask(old)
    for listener, connect in listeners:
        threading.Thread(target=serve, args=(listener, connect), daemon=True).start()
    # Handled by doing nothing, not ignored: the command starts with the default handlers.
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: None)
    code = subprocess.Popen(command).wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
