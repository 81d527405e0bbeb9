"""The master's HTTP/1.1 connections: uvicorn's httptools protocol, each response sent in one
write.

Why: uvicorn writes a response's head as soon as the app starts it and its body when the app
sends it, so a small answer (a metric report's ``{}``) costs two ``send`` system calls and two
TCP segments, and the client wakes up twice to read it. Over loopback the sender's system call
also delivers the segment, so under 2,000 reports a second these writes were a tenth of the
master's busy samples (py-spy of ``benchmarks/master_metrics.py``). Here what one connection
writes within one turn of the event loop goes out together at the end of that turn.

The protocol also serves the hot lane (``api._hot.HotLane``, found on the application): a
metric report whose head the lane takes is read, stored and answered here, with no ASGI scope
completed, no task, no receive/send messages and no middleware; uvicorn's connection rules
hold for it as for any request (keep-alive and its timer, pipelined requests answered in order,
a connection lost meanwhile, a graceful shutdown). What the lane does not take goes to the
application as uvicorn hands it over; what it gives back (a body that does not parse, an
error) goes to the application then, with the body already read.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

# Past this many bytes pending, a write goes out at once: large bodies keep the transport's
# own flow control (pause_writing) as they had it.
FLUSH_BYTES = 64 * 1024


class CoalescedWrites:
    """A transport whose writes of one event-loop turn are sent as one write of ``transport``.

    Everything but writing and closing is the wrapped transport's own. ``close`` sends what is
    pending first; ``abort`` drops it, as the transport drops its buffer.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))
        self._pending_bytes += len(data)
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what is pending now (no-op when nothing is)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        if not self.transport.is_closing():
            self.transport.write(data)

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._pending, self._pending_bytes = [], 0
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class _Unset:
    """The ``message_event`` of a hot request: nothing waits on it."""

    def set(self) -> None:
        pass


class _HotRequest:
    """A request the hot lane took, as the connection's current cycle: what uvicorn's
    connection code reads of a cycle (``response_complete``, ``disconnected``,
    ``keep_alive``, ``message_event``) and what the lane needs."""

    message_event = _Unset()

    def __init__(self, ticket: Any, url: bytes, headers: Any, keep_alive: bool) -> None:
        self.ticket, self.url, self.headers, self.keep_alive = ticket, url, headers, keep_alive
        self.body = bytearray()
        self.response_complete = False
        self.disconnected = False


# The 200 answer of a hot report, for one list of uvicorn's default headers (server, date:
# the server replaces the list every second): (that list, head and body without "connection").
_ok: tuple[Any, bytes] = (None, b"")


def _ok_answer(default_headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    global _ok
    if _ok[0] is not default_headers:
        head = [STATUS_LINE[200], *(b"%s: %s\r\n" % (n, v) for n, v in default_headers)]
        head.append(b"content-length: 2\r\ncontent-type: application/json\r\n")
        _ok = (default_headers, b"".join(head))
    if keep_alive:
        return _ok[1] + b"\r\n{}"
    return _ok[1] + b"connection: close\r\n\r\n{}"


def _find_lane(app: Any) -> Any:
    """The ``hot_lane`` of the master's application under uvicorn's middlewares (None: the
    application has none)."""
    for _ in range(8):
        if app is None:
            return None
        lane = getattr(app, "hot_lane", None)
        if lane is not None:
            return lane
        app = getattr(app, "app", None)
    return None


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over :class:`CoalescedWrites`, with the hot lane (see
    module doc). A connection upgraded to a WebSocket is handed the transport itself."""

    lane: Any = None  # the application's HotLane, if it has one

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]
        self.lane = _find_lane(self.app)

    def on_message_begin(self) -> None:
        # uvicorn builds the request's scope here; the lane needs none, so it is built only
        # for a request that goes to the application (_scope).
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = None  # type: ignore[assignment]

    def _scope(self, headers: list[tuple[bytes, bytes]]) -> Any:
        """The scope uvicorn builds at a message's start, for a request with ``headers``;
        the state of the message being parsed is left as it is."""
        url, expect, current, scope = self.url, self.expect_100_continue, self.headers, self.scope
        super().on_message_begin()
        built = self.scope
        built["headers"] = headers
        self.url, self.expect_100_continue, self.headers, self.scope = url, expect, current, scope
        return built

    def on_headers_complete(self) -> None:
        lane = self.lane
        cycle = self.cycle
        if (
            lane is not None
            and (cycle is None or cycle.response_complete)
            and self.parser.get_method() == b"POST"
            and not self.expect_100_continue
            and self.parser.get_http_version() == "1.1"
            and not self.parser.should_upgrade()
            and self.limit_concurrency is None
            and not self.root_path
            and not self.access_log
        ):
            ticket = lane.take(self.url, self.headers)
            if ticket is not None:
                keep_alive = self.parser.should_keep_alive()
                hot = _HotRequest(ticket, self.url, self.headers, keep_alive)
                self.cycle = hot  # type: ignore[assignment]
                return
        self.scope = self._scope(self.headers)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        cycle: Any = self.cycle
        if type(cycle) is _HotRequest:
            cycle.body += body  # at most the lane's Content-Length limit
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle: Any = self.cycle
        if type(cycle) is not _HotRequest:
            super().on_message_complete()
            return
        done = functools.partial(self._hot_done, cycle)
        to_app = functools.partial(self._to_app, cycle, self.app)
        try:
            self.lane.run(cycle.ticket, bytes(cycle.body), done, to_app)
        except Exception as e:  # noqa: BLE001 - answered as the app answers it (a 500 if not)
            done(e)

    def _hot_done(self, hot: _HotRequest, error: BaseException | None) -> None:
        """The lane stored the report (``error`` None) or refused it: answer."""
        if error is not None:
            routes = self.lane.routes
            self._to_app(hot, functools.partial(_answer_error, routes, error))
            return
        hot.response_complete = True
        if hot.disconnected:
            return
        transport: Any = self.transport  # CoalescedWrites (a hot request is never upgraded)
        transport.write(_ok_answer(self.server_state.default_headers, hot.keep_alive))
        # The answer is whole: out now rather than at the end of the loop's turn (one
        # scheduled flush per report less).
        transport.flush()
        if not hot.keep_alive:
            transport.close()
        self.on_response_complete()

    def _to_app(self, hot: _HotRequest, app: Any) -> None:
        """Serve the hot request through ``app`` with its body already read, as uvicorn would
        have (the scope it would have completed, a cycle of its own, in order)."""
        scope = self._scope(hot.headers)
        scope["method"] = "POST"
        scope["path"] = hot.url.decode("ascii")  # the lane took digits and letters only
        scope["raw_path"] = hot.url
        scope["query_string"] = b""
        cycle = RequestResponseCycle(
            scope=scope,
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=hot.keep_alive,
            on_response=self.on_response_complete,
        )
        cycle.body = hot.body
        cycle.more_body = False
        cycle.message_event.set()  # the whole body is there to receive
        cycle.disconnected = hot.disconnected
        hot.response_complete = True  # it is the cycle's now
        if self.cycle is hot:  # else a pipelined request is current, and waits its turn
            self.cycle = cycle
        self._start_asgi_task(cycle, app)

    # Keep-alive: uvicorn arms a timer after each response and cancels it when the next
    # request's bytes arrive, a timer made and cancelled per request (a few percent of the
    # master's CPU per report at 8,000 a second). Here a connection's one timer stays armed
    # while requests come and, when it fires, closes the connection only if it has been idle
    # for the whole timeout, else sets itself again for what is left.
    _idle_since: float | None = None  # the loop's time the last response completed; None: busy

    def _unset_keepalive_if_required(self) -> None:
        self._idle_since = None

    def on_response_complete(self) -> None:
        # uvicorn's, with the timer above.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._idle_since = None
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self._keep_alive_due
            )

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return  # busy: set again when its response completes
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
        else:
            self.timeout_keep_alive_handler()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None

    def handle_websocket_upgrade(self) -> None:
        wrapper = self.transport
        if isinstance(wrapper, CoalescedWrites):
            wrapper.flush()
            self.transport = wrapper.transport
        super().handle_websocket_upgrade()


async def _answer_error(
    routes: Any, error: BaseException, scope: Any, receive: Any, send: Any
) -> None:
    await routes.answer_error(error, scope, receive, send)
