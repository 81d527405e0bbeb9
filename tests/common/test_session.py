"""determined/common/api/_session.py: which failures a request is retried on, against a real
HTTP server on 127.0.0.1 that answers from a script and counts what reached it."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from determined import errors
from determined.common.api import Session


class _Server:
    """Answers each request with the next status of ``script`` ("sleep" waits 1 s, then 200;
    "drop" closes the connection without an answer); counts the requests."""

    def __init__(self) -> None:
        self.script: list[object] = []
        self.hits = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # headers and body are two writes (40 ms ACK waits)

            def _answer(self) -> None:
                server.hits += 1
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                step = server.script.pop(0) if server.script else 200
                if step == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if step == "sleep":
                    time.sleep(1.0)
                    step = 200
                self.send_response(int(str(step)))
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def _session(url: str) -> Session:
    return Session(url, "t", max_attempts=3, backoff=0.01, timeout=0.3)


def test_post_is_retried_on_gateway_errors_and_dropped_connections(server: _Server) -> None:
    server.script = [502, 503, 200]
    _session(server.url).post("/api/v1/x", json={})
    assert server.hits == 3
    server.hits, server.script = 0, [504, "drop", 200]
    _session(server.url).post("/api/v1/x", json={})
    assert server.hits == 3


def test_post_is_not_retried_on_500_or_a_read_timeout(server: _Server) -> None:
    server.script = [500, 200]
    with pytest.raises(errors.MasterError) as e:
        _session(server.url).post("/api/v1/x", json={})
    assert e.value.status == 500 and server.hits == 1
    server.hits, server.script = 0, ["sleep", 200]
    with pytest.raises(errors.MasterUnreachable):
        _session(server.url).post("/api/v1/x", json={})
    assert server.hits == 1


def test_idempotent_requests_are_retried_on_500_and_read_timeouts(server: _Server) -> None:
    server.script = [500, "sleep", 200]
    _session(server.url).post("/api/v1/x", json={}, idempotent=True)
    assert server.hits == 3
    server.hits, server.script = 0, [500, "sleep", 200]
    _session(server.url).get("/api/v1/x")
    assert server.hits == 3


def test_a_master_that_is_down_is_retried_and_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(errors.MasterUnreachable) as e:
        _session(f"http://127.0.0.1:{port}").post("/api/v1/x", json={})
    assert "after 3 attempts" in str(e.value)
    assert e.value.maybe_delivered is False  # no attempt reached the master
