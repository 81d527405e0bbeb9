"""The master's HTTP protocol (``determined/master/_http_protocol.py``): what a connection
writes in one turn of the event loop goes out in one write, and nothing is lost, reordered or
held back: pipelined requests, large streamed bodies, a refused request, a WebSocket upgrade.
A fake transport for the write rules, then a real uvicorn server on 127.0.0.1 with real
sockets."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
import websocket

from determined.master._http_protocol import (
    FLUSH_BYTES,
    CoalescedWrites,
    CoalescingHttpToolsProtocol,
)


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = self.eof = False
        self.extra = {"peername": ("127.0.0.1", 1)}

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def write_eof(self) -> None:
        self.eof = True

    def get_extra_info(self, name: str) -> Any:
        return self.extra.get(name)


def _wrapped() -> tuple[asyncio.AbstractEventLoop, FakeTransport, CoalescedWrites]:
    loop = asyncio.new_event_loop()
    fake = FakeTransport()
    return loop, fake, CoalescedWrites(fake, loop)  # type: ignore[arg-type]


def _one_turn(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(asyncio.sleep(0))


def test_writes_of_one_turn_go_out_as_one_write_at_its_end() -> None:
    loop, fake, writes = _wrapped()
    writes.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    writes.write(b"")
    writes.write(bytearray(b"{}"))
    assert fake.writes == []
    _one_turn(loop)
    assert fake.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    writes.write(b"next")
    _one_turn(loop)
    assert fake.writes[1:] == [b"next"]
    assert writes.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the transport's
    loop.close()


def test_a_large_write_goes_out_at_once_after_what_was_pending() -> None:
    loop, fake, writes = _wrapped()
    writes.write(b"head")
    writes.write(b"x" * FLUSH_BYTES)
    assert fake.writes == [b"head" + b"x" * FLUSH_BYTES]
    _one_turn(loop)  # the turn's own flush finds nothing left
    assert len(fake.writes) == 1
    loop.close()


def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    loop, fake, writes = _wrapped()
    writes.write(b"last words")
    writes.close()
    assert fake.writes == [b"last words"] and fake.closed
    _one_turn(loop)  # nothing written after the close
    assert fake.writes == [b"last words"]
    loop.close()

    loop, fake, writes = _wrapped()
    writes.write(b"dropped")
    writes.abort()
    _one_turn(loop)
    assert fake.writes == [] and fake.aborted
    loop.close()


def test_write_eof_sends_what_is_pending_first() -> None:
    loop, fake, writes = _wrapped()
    writes.writelines([b"a", b"b"])
    writes.write_eof()
    assert fake.writes == [b"ab"] and fake.eof
    loop.close()


# ----------------------------------------------------------------------------- a real server

BIG = 1_000_000


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "websocket":
        await receive()  # connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            await send({"type": "websocket.send", "text": "echo " + message["text"]})
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/big":  # chunks sent without the app waiting for anything else
        await send({"type": "http.response.start", "status": 200, "headers": []})
        chunk = bytes(range(256)) * 400  # 102,400 bytes
        sent = 0
        while sent < BIG:
            part = chunk[: BIG - sent]
            sent += len(part)
            await send({"type": "http.response.body", "body": part, "more_body": sent < BIG})
        return
    answer = scope["path"].encode() + b" " + body
    headers = [(b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=port, http=CoalescingHttpToolsProtocol, log_level="warning"
    )
    serving = uvicorn.Server(config)
    thread = threading.Thread(target=serving.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not serving.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    yield port
    serving.should_exit = True
    thread.join(10)


def _read_all(sock: socket.socket, until: bytes, count: int = 1) -> bytes:
    data = b""
    while data.count(until) < count:
        chunk = sock.recv(65536)
        assert chunk, f"closed early after {data!r}"
        data += chunk
    return data


def test_pipelined_requests_are_answered_whole_and_in_order(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        requests = b"".join(
            f"POST /r{i} HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nb{i:02d}".encode()
            for i in range(20)
        )
        sock.sendall(requests)
        data = _read_all(sock, b"HTTP/1.1 200 OK", 20)
        while not data.endswith(b"/r19 b19"):
            data += sock.recv(65536)
    answers = [a.split(b"\r\n\r\n", 1)[1] for a in data.split(b"HTTP/1.1 200 OK")[1:]]
    assert answers == [f"/r{i} b{i:02d}".encode() for i in range(20)]


def test_a_large_streamed_body_arrives_whole(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        data = _read_all(sock, b"0\r\n\r\n")
    head, chunked = data.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head
    body, rest = b"", chunked
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            break
        body, rest = body + rest[:size], rest[size + 2 :]
    assert body == (bytes(range(256)) * 4000)[:BIG]


def test_a_malformed_request_gets_400_and_the_connection_closes(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 400 ") and data.endswith(b"Invalid HTTP request received.")


def test_a_websocket_upgrade_gets_the_connection(server: int) -> None:
    ws = websocket.create_connection(f"ws://127.0.0.1:{server}/ws", timeout=10)
    for text in ("one", "two"):
        ws.send(text)
        assert ws.recv() == f"echo {text}"
    ws.close()
