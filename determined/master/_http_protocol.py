"""The master's HTTP/1.1 connections: uvicorn's httptools protocol, each response sent in one
write.

Why: uvicorn writes a response's head as soon as the app starts it and its body when the app
sends it, so a small answer (a metric report's ``{}``) costs two ``send`` system calls and two
TCP segments, and the client wakes up twice to read it. Over loopback the sender's system call
also delivers the segment, so under 2,000 reports a second these writes were a tenth of the
master's busy samples (py-spy of ``benchmarks/master_metrics.py``). Here what one connection
writes within one turn of the event loop goes out together at the end of that turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over :class:`CoalescedWrites` (see module doc). A
    connection upgraded to a WebSocket is handed the transport itself."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]

    def handle_websocket_upgrade(self) -> None:
        wrapper = self.transport
        if isinstance(wrapper, CoalescedWrites):
            wrapper.flush()
            self.transport = wrapper.transport
        super().handle_websocket_upgrade()
