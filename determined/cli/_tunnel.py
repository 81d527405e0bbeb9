"""``python -m determined.cli._tunnel MASTER SERVICE``: ssh's ProxyCommand for ``det shell
open``. It joins its stdin/stdout to a task's TCP port through the master's proxy: a websocket
to ``/proxy/<service>/tcp`` whose binary messages carry the raw stream (0.37's scheme). The
login token comes in ``DET_TUNNEL_TOKEN``, else from the logins ``det user login`` stored.

A minimal RFC 6455 client on the standard library (no websocket package is a dependency of the
CLI): one handshake, masked binary frames out, frames in until a close.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import socket
import socketserver
import ssl
import struct
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping

CHUNK = 64 * 1024


class TunnelError(Exception):
    """The master refused the websocket (no login, not the owner, no such running task)."""


def connect(master: str, service: str, token: str) -> socket.socket:
    """An open websocket (after the 101) to ``/proxy/<service>/tcp`` on ``master``."""
    url = urllib.parse.urlparse(master if "://" in master else f"http://{master}")
    secure = url.scheme == "https"
    host = url.hostname or "localhost"
    port = url.port or (443 if secure else 80)
    sock: socket.socket = socket.create_connection((host, port))
    # Keystrokes and prompts are small writes: without this each waits for the last one's ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if secure:
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    path = f"{url.path.rstrip('/')}/proxy/{service}/tcp"
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    )
    sock.sendall(request.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(1)
        if not data:
            raise TunnelError("the master closed the connection during the websocket handshake")
        head += data
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 101 " not in status + " ":
        raise TunnelError(f"the master refused the tunnel: {status}")
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            raise EOFError
        out += data
    return out


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """``(opcode, payload)`` of the next frame (the server's are never masked)."""
    b1, b2 = _recv_exact(sock, 2)
    length = b2 & 0x7F
    if length == 126:
        length = struct.unpack("!H", _recv_exact(sock, 2))[0]
    elif length == 127:
        length = struct.unpack("!Q", _recv_exact(sock, 8))[0]
    mask = _recv_exact(sock, 4) if b2 & 0x80 else b""
    payload = _recv_exact(sock, length)
    if mask:
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return b1 & 0x0F, payload


def frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    mask = secrets.token_bytes(4)
    return head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))


def pump(
    sock: socket.socket,
    read: Callable[[], bytes] = lambda: os.read(0, CHUNK),
    write: Callable[[bytes], object] = lambda data: os.write(1, data),
) -> None:
    """``read()`` -> binary frames, frames -> ``write``, until either side ends (stdin and
    stdout by default: ssh's ProxyCommand)."""
    lock = threading.Lock()

    def send(opcode: int, payload: bytes) -> None:
        with lock:
            sock.sendall(frame(opcode, payload))

    def upstream() -> None:
        try:
            while data := read():
                send(0x2, data)
            send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while True:
            opcode, payload = read_frame(sock)
            if opcode in (0x1, 0x2, 0x0):
                write(payload)
            elif opcode == 0x9:
                send(0xA, payload)
            elif opcode == 0x8:
                return
    except (EOFError, OSError):
        return


@contextlib.contextmanager
def published(
    master: str, token: str, services: Mapping[int, str], host: str = "127.0.0.1"
) -> Iterator[list[int]]:
    """Listen on each local port of ``services`` (0: any free one) and carry every connection
    to its service (``<task id>:<port>``) through the master's proxy; yields the ports bound.
    ``det experiment create -p``: a trial's ``proxy_ports`` reached as local ports."""

    def handler_for(service: str) -> type[socketserver.BaseRequestHandler]:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                client: socket.socket = self.request
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    sock = connect(master, service, token)
                except (OSError, TunnelError) as e:
                    print(f"det tunnel: {e}", file=sys.stderr)
                    return
                try:
                    pump(sock, lambda: client.recv(CHUNK), client.sendall)
                finally:
                    sock.close()

        return Handler

    servers = []
    try:
        for local, service in services.items():
            server = socketserver.ThreadingTCPServer((host, local), handler_for(service))
            server.daemon_threads = True
            servers.append(server)
            threading.Thread(target=server.serve_forever, daemon=True).start()
        yield [int(s.server_address[1]) for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def parse_publish(values: list[str]) -> dict[int, int]:
    """``-p LOCAL:TASK`` or ``-p PORT`` (the same on both sides) -> ``{local: task port}``.

    Raises:
        ValueError: not a port or a pair of ports.
    """
    out = {}
    for value in values:
        local, sep, remote = value.partition(":")
        try:
            out[int(local)] = int(remote if sep else local)
        except ValueError as e:
            raise ValueError(f"--publish {value!r}: write PORT or LOCAL_PORT:TASK_PORT") from e
    return out


def _stored_token(master: str) -> str:
    """The login ``det user login`` stored for ``master`` (a command printed by ``det shell
    show-ssh-command`` runs later, without ``DET_TUNNEL_TOKEN``)."""
    from determined.common.api._auth import DEFAULT_USER, TokenStore

    store = TokenStore(master)
    user = store.active_user or os.environ.get("DET_USER") or DEFAULT_USER
    return store.token(user) or ""


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m determined.cli._tunnel MASTER SERVICE", file=sys.stderr)
        return 2
    token = os.environ.get("DET_TUNNEL_TOKEN") or _stored_token(argv[0])
    try:
        sock = connect(argv[0], argv[1], token)
    except (OSError, TunnelError) as e:
        print(f"det tunnel: {e}", file=sys.stderr)
        return 1
    pump(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
