"""The master's WebSocket connections: uvicorn's wsproto protocol, with a plain text message
framed here.

Why: ``/stream``'s initial sync sends one message per row (1,000 experiments of a project:
1,000 messages), each framed by wsproto in Python (an event object, extension hooks, bytearray
copies) and checked again by uvicorn: a third of the master's CPU for such a sync (py-spy of
``benchmarks/master_metrics.py``'s readers; CPU per sync 10.4 -> 7.3 ms with this). A text
message on a connection that offered no extension (so none is in effect: no compression) is
framed by :func:`text_frame`, as wsproto frames it, and written. Anything else (a connection
with permessage-deflate, as browsers offer it, bytes, close, a message while the transport is
paused or the connection is not open) is uvicorn's and wsproto's as before. (Writing a turn's
messages together, as ``_http_protocol.CoalescedWrites`` does, cost more than it saved here.)
"""

from __future__ import annotations

import struct
from typing import Any

from uvicorn.protocols.websockets.wsproto_impl import WSProtocol
from wsproto.connection import ConnectionState


def text_frame(payload: bytes) -> bytes:
    """A server's (unmasked) final text frame of ``payload`` (RFC 6455 5.2)."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


class PlainTextWSProtocol(WSProtocol):
    _plain = False  # the client offered no extension: frames are RFC 6455's plain ones

    def handle_connect(self, event: Any) -> None:
        self._plain = not event.extensions
        super().handle_connect(event)

    async def send(self, message: Any) -> None:
        if (
            self._plain
            and message["type"] == "websocket.send"
            and message.get("bytes") is None
            and self.handshake_complete
            and not (self.disconnected or self.close_sent or self.response_started)
            and self.writable.is_set()
            and self.conn.state is ConnectionState.OPEN
        ):
            if not self.transport.is_closing():
                self.transport.write(text_frame(message["text"].encode()))
            return
        await super().send(message)
