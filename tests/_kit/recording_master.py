"""A real HTTP server on 127.0.0.1 that records every request and answers from a route table.

Cluster-backend tests point a trial's ``DET_MASTER`` at it and then assert the exact paths,
headers and bodies that were sent (``docs/reference/master.md`` §3.2).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    def header(self, name: str) -> str | None:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None


Reply = tuple[int, Any]
Handler = Callable[[Request, "re.Match[str]"], Reply]


class RecordingMaster:
    """Start with ``with RecordingMaster() as m:``; ``m.url`` is its address.

    A ``path_regex`` must match the end of the path (``r"/metrics"`` matches
    ``/api/v1/trials/3/metrics``). ``m.route(method, path_regex, handler_or_json)`` adds or
    replaces a route; a handler gets the
    Request and the regex match and returns ``(status, json_body)``. Unrouted requests get
    ``(404, {"error": {"message": "not routed"}})``. ``m.requests`` lists everything received.
    """

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._make_handler())
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for the next poll, and every test pays it.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def route(self, method: str, path_regex: str, reply: Handler | Reply | Any) -> None:
        if callable(reply):
            handler = reply
        elif isinstance(reply, tuple):
            fixed = reply
            handler = lambda req, m: fixed  # noqa: E731
        else:
            body = reply
            handler = lambda req, m: (200, body)  # noqa: E731
        with self._lock:
            self._routes.insert(0, (method.upper(), re.compile(path_regex + r"\Z"), handler))

    def find(self, method: str, path_regex: str) -> list[Request]:
        pattern = re.compile(path_regex + r"\Z")
        with self._lock:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    def _dispatch(self, req: Request) -> Reply:
        with self._lock:
            self.requests.append(req)
            routes = list(self._routes)
        for method, pattern, handler in routes:
            if method == req.method:
                m = pattern.search(req.path)
                if m:
                    return handler(req, m)
        return 404, {"error": {"message": f"not routed: {req.method} {req.path}"}}

    def _make_handler(self) -> type[BaseHTTPRequestHandler]:
        master = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The headers and the body go out as two writes: with Nagle's algorithm the body
            # waits for the client's delayed ACK of the headers (up to 40 ms a request).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                req = Request(
                    method=self.command,
                    path=parsed.path,
                    query=urllib.parse.parse_qs(parsed.query),
                    headers=dict(self.headers.items()),
                    body=body,
                )
                status, reply = master._dispatch(req)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle

        return _Handler

    def __enter__(self) -> RecordingMaster:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
