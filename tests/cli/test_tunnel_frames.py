"""``det shell open``'s tunnel speaks RFC 6455 by hand: every frame it writes reads back as
the same opcode and payload (all three length encodings, masked), property-tested."""

from __future__ import annotations

import socket
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from determined.cli import _tunnel


@settings(max_examples=60, deadline=None)
@given(
    opcode=st.sampled_from([0x1, 0x2, 0x8, 0x9, 0xA]),
    payload=st.one_of(st.binary(max_size=200), st.binary(min_size=126, max_size=70000)),
)
def test_frames_round_trip(opcode: int, payload: bytes) -> None:
    a, b = socket.socketpair()
    with a, b:
        data = _tunnel.frame(opcode, payload)
        assert data[1] & 0x80, "client frames must be masked"
        writer = threading.Thread(target=a.sendall, args=(data,))
        writer.start()
        assert _tunnel.read_frame(b) == (opcode, payload)
        writer.join()


def test_a_refused_handshake_says_why() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def refuse() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    t = threading.Thread(target=refuse)
    t.start()
    try:
        _tunnel.connect(f"http://127.0.0.1:{server.getsockname()[1]}", "abc", "tok")
    except _tunnel.TunnelError as e:
        assert "403" in str(e)
    else:
        raise AssertionError("a 403 must not open the tunnel")
    finally:
        t.join()
        server.close()
