"""Server and client CPU per request of uvicorn's httptools protocol against the master's
(``determined/master/_http_protocol.CoalescingHttpToolsProtocol``: a response's head and body
in one write), for a tiny ASGI app answering ``{}`` (what a metric report gets).

Each round starts one server per protocol (a subprocess on 127.0.0.1), and drives it with C
keep-alive connections sending R requests each, one at a time per connection, from one client
process; the two take turns for ``--rounds`` rounds. Printed: the server's and the client's
CPU (user + system, from ``/proc``) per request, and the ratio master/uvicorn of each.

    .venv/bin/python benchmarks/http_writes.py
    .venv/bin/python benchmarks/http_writes.py --connections 50 --requests 400 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

SERVER = """
import sys, uvicorn
from determined.master._http_protocol import CoalescingHttpToolsProtocol

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})

http = CoalescingHttpToolsProtocol if sys.argv[2] == "master" else "httptools"
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http=http, access_log=False,
            log_level="warning", loop="uvloop")
"""

REQUEST = (
    b"POST /api/v1/trials/1/metrics HTTP/1.1\r\nhost: 127.0.0.1\r\n"
    b"content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_connection(port: int, requests: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(requests):
        writer.write(REQUEST)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
    writer.close()


async def drive(port: int, connections: int, requests: int) -> None:
    await asyncio.gather(*(one_connection(port, requests) for _ in range(connections)))


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server did not start")


def one_round(kind: str, connections: int, requests: int) -> tuple[float, float]:
    """(server, client) CPU seconds per request of one run against a fresh server."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), kind])
    try:
        wait_listening(port)
        asyncio.run(drive(port, 1, 50))  # warm up
        server_before = cpu_of(server.pid)
        client_before = resource.getrusage(resource.RUSAGE_SELF)
        asyncio.run(drive(port, connections, requests))
        client_after = resource.getrusage(resource.RUSAGE_SELF)
        server_cpu = cpu_of(server.pid) - server_before
    finally:
        server.terminate()
        server.wait(10)
    client_cpu = (client_after.ru_utime + client_after.ru_stime) - (
        client_before.ru_utime + client_before.ru_stime
    )
    n = connections * requests
    return server_cpu / n, client_cpu / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--requests", type=int, default=400, help="per connection")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {"uvicorn": [], "master": []}
    for _ in range(args.rounds):
        for kind in figures:
            figures[kind].append(one_round(kind, args.connections, args.requests))
    for kind, runs in figures.items():
        server = ", ".join(f"{s * 1e6:.0f}" for s, _ in runs)
        client = ", ".join(f"{c * 1e6:.0f}" for _, c in runs)
        print(f"{kind:<8} server CPU µs/request {server}; client {client}")
    for i, name in ((0, "server"), (1, "client")):
        ratios = [m[i] / u[i] for m, u in zip(figures["master"], figures["uvicorn"], strict=True)]
        print(
            f"ratio master/uvicorn, {name} CPU per request: median "
            f"{statistics.median(ratios):.3f}x ({', '.join(f'{r:.3f}' for r in ratios)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
