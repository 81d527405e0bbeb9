"""The master's proxy to tasks' services (0.37's ``/proxy/<service>/...``): HTTP and websocket
traffic to a port a task serves on 127.0.0.1, for callers with a login (bearer token or the
``auth`` cookie) who own the task or are admins.

``<service>`` is a task id (its notebook's or TensorBoard's web port, a shell's sshd, or a
command's or a running trial's first ``environment.proxy_ports`` entry) or ``<task id>:<port>``
for another proxy port. The whole path is forwarded unchanged (JupyterLab and TensorBoard
serve under it). A websocket to a path ending in ``tcp``, to a shell, or to a ``proxy_ports``
entry with ``proxy_tcp: true`` carries raw TCP in its binary messages (``det shell open``'s
tunnel and ``det experiment create -p``, as 0.37). The caller's
master credentials are never passed on: the service runs whatever its owner chose.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, NamedTuple

import httpx
import sqlalchemy as sa
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect
from wsproto import ConnectionType, WSConnection
from wsproto import events as ws_events

from determined.master._errors import ApiError, NotFound, PermissionDenied
from determined.master.api._auth import Caller, Principal, _bearer, authenticate_connection
from determined.master.api._services import services
from determined.master.resources._sandbox import Sandbox
from determined.master.resources._tasks import UNIX_PREFIX
from determined.master.store import Store, _experiments, _trials
from determined.master.store import _tasks as _task_rows

router = APIRouter()
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
# Hop-by-hop headers (RFC 9110, section 7.6.1) are not passed on in either direction, nor what
# names the master.
_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}
_CREDENTIALS = {"authorization", "grpc-metadata-x-allocation-token", "x-allocation-token"}
CHUNK = 64 * 1024
CONNECT_WAIT_S = 10.0


class BadGateway(ApiError, status=502, code=14):  # 14: UNAVAILABLE
    """The task's service did not answer."""


def _proxy_ports(config: dict[str, Any]) -> dict[int, bool]:
    """``environment.proxy_ports``: port -> whether it is raw TCP (``proxy_tcp``), in order."""
    ports = (config.get("environment") or {}).get("proxy_ports") or []
    out: dict[int, bool] = {}
    for p in ports:
        value = p.get("proxy_port") if isinstance(p, dict) else p
        with contextlib.suppress(TypeError, ValueError):
            out[int(str(value))] = isinstance(p, dict) and p.get("proxy_tcp") is True
    return out


class Target(NamedTuple):
    """A service the proxy reaches: its port on 127.0.0.1 (or ``socket``, the unix socket a
    notebook serves on: only the master reaches it, docs/security.md), the task's type, and
    whether a websocket to it carries raw TCP (a shell's sshd, a ``proxy_tcp`` port)."""

    port: int
    kind: str
    tcp: bool
    socket: str | None = None

    def where(self) -> str:
        return f"socket {self.socket}" if self.socket else f"port {self.port}"


def _served(kind: str, value: Any) -> Target:
    """The target of one of a task's recorded ports (a number, or ``unix:<path>``)."""
    text = str(value)
    if text.startswith(UNIX_PREFIX):
        return Target(0, kind, False, text[len(UNIX_PREFIX) :])
    return Target(int(text), kind, kind == "SHELL")


def _trial_task(conn: sa.Connection, task_id: str) -> dict[str, Any] | None:
    """A trial's task as the proxy sees one (its experiment's ``proxy_ports``), or None."""
    live = [a for a in _trials.live_allocations(conn) if a["task_id"] == task_id]
    if not live:
        return None
    trial = _trials.require_trial(conn, int(live[0]["trial_id"]))
    exp = _experiments.require_experiment(conn, int(trial["experiment_id"]))
    return {
        "allocation_id": live[0]["id"],
        "owner_id": exp["owner_id"],
        "state": "RUNNING",
        "ports": {},
        "config": exp["config"],
        "type": "TRIAL",
    }


def target(store: Store, caller: Principal, service: str, sandbox: Sandbox | None = None) -> Target:
    """The running task's service ``service`` names, if the caller may reach it (a
    ``proxy_ports`` entry on its unix socket where ``sandbox`` gave the task a private
    network).

    Raises:
        NotFound: no such task, it does not run, or it serves no such port.
        PermissionDenied: another user's task (not an admin).
    """
    caller.require_user()
    task_id, _, port_text = service.partition(":")
    with store.read() as conn:
        row = _task_rows.get(conn, task_id)
        if row is not None:
            row = {**row, "allocation_id": _task_rows.allocation_of(row)}
        else:
            row = _trial_task(conn, task_id)
    if row is None:
        raise NotFound(f"service not found: {service}")
    if not caller.info.admin and int(row["owner_id"]) != caller.info.user_id:
        raise PermissionDenied(
            f"task {task_id} is not yours: only its owner or an admin may open it"
        )
    if row["state"] != "RUNNING":
        raise NotFound(f"service not found: {service} (the task is {str(row['state']).lower()})")
    served = dict(row["ports"] or {})
    kind = str(row["type"])
    extra = _proxy_ports(dict(row["config"] or {}))
    if port_text:
        try:
            port = int(port_text)
        except ValueError as e:
            raise NotFound(f"service not found: {service} (the port is not a number)") from e
        if port not in extra and port not in served.values():
            raise NotFound(f"service not found: {service} (not one of the task's proxy_ports)")
    elif served:
        return _served(kind, next(iter(served.values())))
    elif extra:
        port = next(iter(extra))
    else:
        raise NotFound(f"service not found: {service} (the task serves no port)")
    sock = None if sandbox is None else sandbox.service_socket(str(row["allocation_id"]), port)
    return Target(port, kind, kind == "SHELL" or extra.get(port, False), sock)


def _cookie_without_auth(value: str) -> str:
    parts = [p.strip() for p in value.split(";")]
    return "; ".join(p for p in parts if p and not p.startswith("auth="))


def _request_headers(headers: Any) -> list[tuple[str, str]]:
    out = []
    for key, value in headers.items():
        low = key.lower()
        if low in _HOP or low in _CREDENTIALS or low.startswith("sec-websocket"):
            continue
        if low == "cookie":
            value = _cookie_without_auth(value)
            if not value:
                continue
        out.append((key, value))
    return out


@router.api_route("/proxy/{service}/{path:path}", methods=METHODS, include_in_schema=False)
async def proxy_http(service: str, path: str, request: Request, caller: Caller) -> Any:
    svc = services(request)
    store: Store = svc.store
    found = await run_in_threadpool(target, store, caller, service, svc.sandbox)
    port = found.port
    url = f"http://127.0.0.1:{port or 80}{request.url.path}"
    if request.url.query:
        url += "?" + request.url.query
    headers = _request_headers(request.headers)
    # The caller's Host: services compare it with Origin (JupyterLab) and build URLs from it.
    headers.append(("host", request.headers.get("host") or f"127.0.0.1:{port}"))
    headers.append(("x-forwarded-proto", request.url.scheme))
    if request.client is not None:
        headers.append(("x-real-ip", request.client.host))
    transport = None if found.socket is None else httpx.AsyncHTTPTransport(uds=found.socket)
    client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), transport=transport)
    body = await request.body()
    try:
        upstream = await client.send(
            client.build_request(request.method, url, headers=headers, content=body),
            stream=True,
        )
    except httpx.HTTPError as e:
        await client.aclose()
        raise BadGateway(f"the task's service at {found.where()} did not answer: {e}") from e
    out_headers = [(k, v) for k, v in upstream.headers.multi_items() if k.lower() not in _HOP]

    async def close() -> None:
        await upstream.aclose()
        await client.aclose()

    response = StreamingResponse(
        upstream.aiter_raw(CHUNK),
        status_code=upstream.status_code,
        background=BackgroundTask(close),
    )
    response.raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out_headers]
    return response


def shell_target(store: Store, service: str) -> Target | None:
    """A running shell's sshd when ``service`` names it, else None: reached without a login, as
    0.37 registers it (its proxy port is ``unauthenticated``: the SSH key the shell was created
    with is the credential; sshd refuses any other). 0.37's own ``det shell open`` tunnels
    through an unauthenticated session."""
    task_id, _, port_text = service.partition(":")
    with store.read() as conn:
        row = _task_rows.get(conn, task_id)
    if row is None or str(row["type"]) != "SHELL" or row["state"] != "RUNNING":
        return None
    served = [v for v in dict(row["ports"] or {}).values() if str(v).isdigit()]
    if not served or (port_text and port_text != str(served[0])):
        return None
    return Target(int(served[0]), "SHELL", True)


@router.websocket("/proxy/{service}/{path:path}")
async def proxy_websocket(websocket: WebSocket, service: str, path: str) -> None:
    store: Store = services(websocket).store
    try:
        shell = None
        if _bearer(websocket) is None:
            shell = await run_in_threadpool(shell_target, store, service)
        if shell is not None:
            found = shell
        else:
            caller = await authenticate_connection(websocket)
            found = await run_in_threadpool(
                target, store, caller, service, services(websocket).sandbox
            )
    except ApiError as e:
        await websocket.close(code=1008, reason=str(e)[:120])
        return
    port = found.port
    opened = await _open(found)
    if opened is None:
        await websocket.close(code=1011, reason=f"the task's {found.where()} does not answer")
        return
    reader, writer = opened
    try:
        if found.tcp or websocket.url.path.endswith("tcp"):
            await websocket.accept()
            await _pump_tcp(websocket, reader, writer)
        else:
            await _pump_websocket(websocket, reader, writer, port)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _open(
    found: Target, wait_s: float = CONNECT_WAIT_S
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection to the task's port (or socket), retried for ``wait_s`` (a shell's sshd or
    a server may still be starting when the task is already RUNNING); None if it never
    answers."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            if found.socket is not None:
                return await asyncio.open_unix_connection(found.socket)
            return await asyncio.open_connection("127.0.0.1", found.port)
        except OSError:
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(0.2)


async def _pump_tcp(
    websocket: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Binary websocket messages <-> the raw TCP stream, until either side closes."""

    async def upstream_to_client() -> None:
        while data := await reader.read(CHUNK):
            await websocket.send_bytes(data)

    async def client_to_upstream() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes") or (message.get("text") or "").encode()
            writer.write(data)
            await writer.drain()

    await _race(upstream_to_client(), client_to_upstream())
    with contextlib.suppress(Exception):
        await websocket.close()


async def _pump_websocket(
    websocket: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
) -> None:
    """A websocket to the task's own websocket server (wsproto as the client), message by
    message both ways."""
    path = websocket.url.path + (f"?{websocket.url.query}" if websocket.url.query else "")
    protocols = [
        p.strip()
        for p in websocket.headers.get("sec-websocket-protocol", "").split(",")
        if p.strip()
    ]
    extra = [
        (k.encode("latin-1"), v.encode("latin-1"))
        for k, v in _request_headers(websocket.headers)
        if k.lower() not in ("cookie",) or v
    ]
    conn = WSConnection(ConnectionType.CLIENT)
    writer.write(
        conn.send(
            ws_events.Request(
                host=websocket.headers.get("host") or f"127.0.0.1:{port}",
                target=path,
                subprotocols=protocols,
                extra_headers=extra,
            )
        )
    )
    await writer.drain()
    accepted: ws_events.AcceptConnection | None = None
    while accepted is None:
        data = await reader.read(CHUNK)
        if not data:
            await websocket.close(code=1011, reason="the task's service closed the connection")
            return
        conn.receive_data(data)
        for event in conn.events():
            if isinstance(event, ws_events.AcceptConnection):
                accepted = event
            elif isinstance(event, ws_events.RejectConnection):
                await websocket.close(
                    code=1008, reason=f"the task's service refused ({event.status_code})"
                )
                return
    await websocket.accept(subprotocol=accepted.subprotocol)

    async def upstream_to_client() -> None:
        text: list[str] = []
        binary: list[bytes] = []
        while True:
            data = await reader.read(CHUNK)
            conn.receive_data(data or None)
            for event in conn.events():
                if isinstance(event, ws_events.TextMessage):
                    text.append(event.data)
                    if event.message_finished:
                        await websocket.send_text("".join(text))
                        text.clear()
                elif isinstance(event, ws_events.BytesMessage):
                    binary.append(bytes(event.data))
                    if event.message_finished:
                        await websocket.send_bytes(b"".join(binary))
                        binary.clear()
                elif isinstance(event, ws_events.Ping):
                    writer.write(conn.send(event.response()))
                elif isinstance(event, ws_events.CloseConnection):
                    with contextlib.suppress(Exception):
                        writer.write(conn.send(event.response()))
                    return
            if not data:
                return

    async def client_to_upstream() -> None:
        while True:
            try:
                message = await websocket.receive()
            except WebSocketDisconnect:
                message = {"type": "websocket.disconnect"}
            if message["type"] == "websocket.disconnect":
                with contextlib.suppress(Exception):
                    writer.write(conn.send(ws_events.CloseConnection(code=1000)))
                    await writer.drain()
                return
            if message.get("bytes") is not None:
                writer.write(conn.send(ws_events.BytesMessage(data=message["bytes"])))
            else:
                writer.write(conn.send(ws_events.TextMessage(data=message.get("text") or "")))
            await writer.drain()

    await _race(upstream_to_client(), client_to_upstream())
    with contextlib.suppress(Exception):
        await websocket.close()


async def _race(*coros: Any) -> None:
    """Run both directions; when one ends (a side closed), stop the other."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
