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


# ----------------------------------------------------------------------------- the hot lane


class _Routes:
    async def answer_error(self, error: BaseException, scope: Any, receive: Any, send: Any) -> None:
        body = f"refused {error}".encode()
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 409, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Lane:
    """Takes POSTs to /hot...: a body ``ok <seconds>`` is stored after that delay, ``err``
    is refused, ``raise`` makes ``run`` raise, ``later <seconds>`` is handed to the app after
    that delay (as a token read first that turns out not to be the lane's), anything else is
    handed to the app at once."""

    def __init__(self) -> None:
        self.routes = _Routes()
        self.taken: list[bytes] = []

    def take(self, url: bytes, headers: list[tuple[bytes, bytes]]) -> Any:
        assert all(name == name.lower() for name, _ in headers)
        return url if url.startswith(b"/hot") else None

    def run(self, ticket: Any, raw: bytes, done: Any, to_app: Any) -> None:
        loop = asyncio.get_running_loop()
        if raw.startswith(b"ok"):
            self.taken.append(ticket + b" " + raw)
            loop.call_later(float(raw.split()[1]), done, None)
        elif raw.startswith(b"raise"):
            raise RuntimeError("the lane failed")
        elif raw.startswith(b"err"):
            self.taken.append(ticket + b" " + raw)
            loop.call_later(0.01, done, ValueError(raw.decode()))
        elif raw.startswith(b"later"):
            loop.call_later(float(raw.split()[1]), to_app)
        else:
            to_app()


class _LaneApp:
    hot_lane = _Lane()

    def __init__(self) -> None:
        self.app = _app  # under uvicorn's middlewares, as the master's app is

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class _NoAccessLog(CoalescingHttpToolsProtocol):
    """The protocol as the master runs it, with no access log (pytest's log capture gives
    uvicorn's access logger a handler, and an access log takes requests off the lane)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False


def _lane_server(keep_alive_s: float) -> Iterator[tuple[int, _Lane]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    app = _LaneApp()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=_NoAccessLog,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=keep_alive_s,  # type: ignore[arg-type]
    )
    serving = uvicorn.Server(config)
    thread = threading.Thread(target=serving.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not serving.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    yield port, app.hot_lane
    serving.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def lane_server() -> Iterator[tuple[int, _Lane]]:
    yield from _lane_server(5.0)


@pytest.fixture(scope="module")
def short_keep_alive() -> Iterator[int]:
    for port, _ in _lane_server(0.6):
        yield port


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\n{extra}content-length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _answers(data: bytes) -> list[tuple[bytes, bytes]]:
    """(status line, body) of each answer in ``data`` (each with a content-length)."""
    out = []
    while data:
        head, data = data.split(b"\r\n\r\n", 1)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        out.append((head.split(b"\r\n")[0], data[:length]))
        data = data[length:]
    return out


def _read_answers(sock: socket.socket, count: int) -> list[tuple[bytes, bytes]]:
    data = b""
    while True:
        try:
            answers = _answers(data)
        except (IndexError, ValueError):
            answers = []
        if len(answers) == count and (not answers or len(data) and data.endswith(answers[-1][1])):
            return answers
        chunk = sock.recv(65536)
        assert chunk, f"closed early after {data!r}"
        data += chunk


def test_the_hot_lane_keeps_answers_in_order_and_hands_back_what_it_does_not_take(
    lane_server: tuple[int, _Lane],
) -> None:
    port, lane = lane_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        # Pipelined behind a slow hot request: the app's request and a hot one (which, not
        # first in line, the app serves) wait their turn.
        sock.sendall(_post("/hot/1", b"ok 0.3") + _post("/r2", b"b2") + _post("/hot/3", b"ok 0"))
        answers = _read_answers(sock, 3)
        # Handed to the app later, with a request pipelined behind it.
        sock.sendall(_post("/hot/8", b"later 0.2") + _post("/hot/9", b"ok 0"))
        answers += _read_answers(sock, 2)
        for request in (
            _post("/hot/4", b"ok 0"),
            _post("/hot/5", b"declined: the app serves it"),
            _post("/hot/6", b"err 6"),
            _post("/hot/7", b"ok 0"),  # the connection is still good after an error
        ):
            sock.sendall(request)
            answers += _read_answers(sock, 1)
    assert answers == [
        (b"HTTP/1.1 200 OK", b"{}"),
        (b"HTTP/1.1 200 OK", b"/r2 b2"),
        (b"HTTP/1.1 200 OK", b"/hot/3 ok 0"),
        (b"HTTP/1.1 200 OK", b"/hot/8 later 0.2"),
        (b"HTTP/1.1 200 OK", b"/hot/9 ok 0"),
        (b"HTTP/1.1 200 OK", b"{}"),
        (b"HTTP/1.1 200 OK", b"/hot/5 declined: the app serves it"),
        (b"HTTP/1.1 409 Conflict", b"refused err 6"),
        (b"HTTP/1.1 200 OK", b"{}"),
    ]
    assert lane.taken[-4:] == [b"/hot/1 ok 0.3", b"/hot/4 ok 0", b"/hot/6 err 6", b"/hot/7 ok 0"]


def test_the_hot_lane_answers_as_uvicorn_does(lane_server: tuple[int, _Lane]) -> None:
    port, _ = lane_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_post("/hot/1", b"ok 0"))
        head = _read_all(sock, b"{}").split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 200 OK"
    names = sorted(line.split(b":")[0] for line in head[1:])
    assert names == [b"content-length", b"content-type", b"date", b"server"]


def test_the_hot_lane_closes_when_asked(lane_server: tuple[int, _Lane]) -> None:
    port, _ = lane_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_post("/hot/1", b"ok 0.05", extra="connection: close\r\n"))
        data = b""
        while chunk := sock.recv(65536):  # until the server closes
            data += chunk
    assert b"\r\nconnection: close\r\n" in data and data.endswith(b"\r\n\r\n{}")


def test_a_client_gone_before_its_hot_answer_costs_the_server_nothing(
    lane_server: tuple[int, _Lane],
) -> None:
    port, lane = lane_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_post("/hot/gone", b"ok 0.2"))
        time.sleep(0.05)
    time.sleep(0.3)  # its answer came due after the connection was lost
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_post("/hot/after", b"ok 0"))
        assert _read_answers(sock, 1) == [(b"HTTP/1.1 200 OK", b"{}")]
    assert b"/hot/gone ok 0.2" in lane.taken


def test_a_lane_that_raises_is_answered_as_the_app_answers_errors(
    lane_server: tuple[int, _Lane],
) -> None:
    port, _ = lane_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_post("/hot/1", b"raise"))
        assert _read_answers(sock, 1) == [(b"HTTP/1.1 409 Conflict", b"refused the lane failed")]
        sock.sendall(_post("/hot/2", b"ok 0"))  # and the connection serves on
        assert _read_answers(sock, 1) == [(b"HTTP/1.1 200 OK", b"{}")]


def test_a_connection_in_use_is_kept_and_an_idle_one_closed_after_the_keep_alive(
    short_keep_alive: int,
) -> None:
    with socket.create_connection(("127.0.0.1", short_keep_alive), timeout=10) as sock:
        # Requests 0.25 s apart for 1.5 s, past the 0.6 s keep-alive: the connection lives.
        for i in range(6):
            hot_or_app = b"/hot/%d" % i if i % 2 else b"/app/%d" % i
            sock.sendall(_post(hot_or_app.decode(), b"ok 0"))
            assert _read_answers(sock, 1)[0][0] == b"HTTP/1.1 200 OK"
            time.sleep(0.25)
        # A request whose answer comes after the keep-alive: busy, not idle, meanwhile.
        sock.sendall(_post("/hot/slow", b"ok 0.8"))
        assert _read_answers(sock, 1) == [(b"HTTP/1.1 200 OK", b"{}")]
        idle_from = time.monotonic()
        assert sock.recv(65536) == b""  # then idle: the server closes it
        idle = time.monotonic() - idle_from
    assert 0.5 <= idle <= 3.0, idle
