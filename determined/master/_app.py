"""``create_app``: the master's FastAPI application over a ``Store``."""

from __future__ import annotations

import contextlib
import hmac
import http.cookies
import inspect
import ipaddress
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import pydantic
import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from determined._version import __version__
from determined.master import _read_workers, api, ingest, resources, webhooks
from determined.master._errors import ApiError, Unauthenticated
from determined.master._periodic import Periodic
from determined.master._signals import STREAM_KEY, Signals
from determined.master.api._auth import TokenResolver, bearer_token, principal_of
from determined.master.api._hot import HotLane, HotRoutes
from determined.master.api._services import Services
from determined.master.api._stream import Stamps
from determined.master.experiment import (
    UNMANAGED_TRIAL_TIMEOUT_S,
    ContainerDefaults,
    Experiments,
    scan_log_policies,
)
from determined.master.store import Store
from determined.master.store._users import csrf_token

logger = logging.getLogger("determined.master")


def _error_body(code: int, message: str) -> dict[str, Any]:
    # The gateway's shape; the reference clients read "message".
    return {"code": code, "message": message, "details": []}


def _describe(errors: list[Any]) -> str:
    parts = []
    for err in errors:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


class _UntypedJson:
    """Determined's clients (ours too) send JSON bodies without a Content-Type; FastAPI reads
    such bodies as JSON only in some versions, so mark them as JSON before it sees them."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = list(scope.get("headers") or [])
            if not any(key == b"content-type" for key, _ in headers):
                scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


# Request bodies are read whole into memory: bound them. A create carries the model definition
# (up to 96 MiB compressed, base64 in JSON); every other body is small.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_CREATE_BODY_BYTES = 160 * 1024 * 1024
_LARGE_BODY_PATHS = frozenset({"/api/v1/experiments"})


class BodyTooLarge(Exception):
    """A request body past its limit (its message is the 413's)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes, the limit here")


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_BEARER_HEADERS = (b"authorization", b"grpc-metadata-x-allocation-token", b"x-allocation-token")
_NO_LOGIN_PATHS = frozenset({"/api/v1/auth/login"})  # every other write needs a login


def allowed_host_names(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a request's Host header may carry: loopback names, the bound address, this
    machine's name when bound beyond loopback, and ``extra`` (``--allowed-hosts``). Any IP
    address is allowed too (see ``_Guards``)."""
    names = {"localhost", bind.lower()}
    if bind not in ("127.0.0.1", "::1", "localhost"):
        names.update({socket.gethostname().lower(), socket.getfqdn().lower()})
    names.update(e.strip().lower().rstrip(".") for e in extra if e.strip())
    return frozenset(names)


def _host_name(host: str) -> str:
    if host.startswith("["):  # [v6]:port
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _Guards:
    """What every request passes before anything else runs, in one middleware that reads the
    headers once (as three middlewares they were copied three times for each of 2,000 metric
    reports a second):

    - **Host** (DNS rebinding): a page on ``evil.example`` whose name an attacker points at
      127.0.0.1 reaches the master with ``Host: evil.example``. A request naming a host that is
      neither an IP address nor an allowed name is refused with 421.
    - **CSRF**: a browser sends the ``auth`` cookie with any site's form post. A
      state-changing request authenticated only by that cookie must carry ``X-CSRF-Token``
      (``csrf_token`` of the cookie's token, which the login answer hands out as
      ``csrfToken``), or is refused with 403. Requests with a bearer token (CLI, SDK, trials,
      the web UI) are not affected, nor those to ``/proxy/...`` (docs/tasks.md).
    - **Authentication before the body**: a state-changing request to ``/api/`` or
      ``/proxy/`` (but logging in) without a valid token is answered 401 before its body is
      read, so unauthenticated uploads cost the master no memory (the route's own
      dependency then finds the token in the cache).
    - **Body size**: 413 for a body past its limit, at once from its Content-Length, or, for a
      chunked body, once that many bytes have arrived (the app then sees a disconnect and its
      answer is dropped). Any other body needs no watching: the HTTP parser hands the app
      exactly Content-Length bytes (none without one).
    """

    # Host headers already found allowed: parsing an address for every request was a few
    # percent of the master's CPU. Bounded: any client chooses the header.
    MAX_KNOWN = 256

    def __init__(self, app: Any, allowed: frozenset[str], store: Store | None = None) -> None:
        self.app = app
        self.allowed = allowed
        self.store = store
        self._known: set[bytes] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"")
        refusal = None if host in self._known else self._host_refusal(host)
        if refusal is None and scope["method"] not in _SAFE_METHODS:
            refusal = _csrf_refusal(scope["path"], headers)
        limit = MAX_CREATE_BODY_BYTES if scope["path"] in _LARGE_BODY_PATHS else MAX_BODY_BYTES
        declared = headers.get(b"content-length", b"")
        if refusal is None and declared.isdigit() and int(declared) > limit:
            refusal = JSONResponse(_error_body(3, str(BodyTooLarge(limit))), status_code=413)
        if refusal is None and scope["method"] not in _SAFE_METHODS:
            refusal = await self._login_refusal(scope["path"], headers)
        if refusal is not None:
            await refusal(scope, receive, send)
        elif b"transfer-encoding" in headers:  # chunked: no length known before it arrives
            await self._bounded(limit, scope, receive, send)
        else:  # the parser hands the app Content-Length bytes, or none without one
            await self.app(scope, receive, send)

    def clears(self, headers: Mapping[bytes, bytes]) -> bool:
        """Whether a state-changing request outside the login and large-body paths with these
        headers passes every check at once, given that its bearer token is in the token cache
        (``api._hot.HotLane``, which checks that): its Host was allowed before, a bearer
        header spares it the CSRF check, and its body has a Content-Length within the limit."""
        declared = headers.get(b"content-length", b"")
        return (
            headers.get(b"host", b"") in self._known
            and any(headers.get(h) for h in _BEARER_HEADERS)
            and declared.isdigit()
            and int(declared) <= MAX_BODY_BYTES
            and b"transfer-encoding" not in headers
        )

    async def _login_refusal(
        self, path: str, headers: Mapping[bytes, bytes]
    ) -> JSONResponse | None:
        """401 for a body-carrying request that needs a login and has no valid token."""
        if self.store is None or path in _NO_LOGIN_PATHS:
            return None
        if not path.startswith(("/api/", "/proxy/")):
            return None
        token = bearer_token(lambda name: headers.get(name.encode(), b"").decode("latin-1"))
        token = token or _cookie(headers.get(b"cookie", b"").decode("latin-1"), "auth")
        try:
            if not token:
                raise Unauthenticated(
                    "no token: log in (POST /api/v1/auth/login) and send "
                    "'Authorization: Bearer <token>'"
                )
            await principal_of(self.store, token)
        except ApiError as e:
            return JSONResponse(_error_body(e.code, e.message), status_code=e.status)
        return None

    def _host_refusal(self, header: bytes) -> JSONResponse | None:
        name = _host_name(header.decode("latin-1").strip()).lower().rstrip(".")
        if name and not _is_ip(name) and name not in self.allowed:
            message = (
                f"this master does not serve host {name!r}; use its address, or add the "
                "name to the master's allowed_hosts (--allowed-hosts)"
            )
            return JSONResponse(_error_body(7, message), status_code=421)
        if len(self._known) < self.MAX_KNOWN:
            self._known.add(header)
        return None

    async def _bounded(self, limit: int, scope: Any, receive: Any, send: Any) -> None:
        """The app, with the body cut off (and 413 answered) past ``limit`` bytes."""
        seen = 0
        refused = False

        async def bounded() -> Any:
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                refused = True
                return {"type": "http.disconnect"}  # the app stops reading; we answer
            return message

        async def unless_refused(message: Any) -> None:
            if not refused:
                await send(message)

        await self.app(scope, bounded, unless_refused)
        if refused:
            response = JSONResponse(_error_body(3, str(BodyTooLarge(limit))), status_code=413)
            await response(scope, receive, send)


def _csrf_refusal(path: str, headers: Mapping[bytes, bytes]) -> JSONResponse | None:
    """403 for a state-changing request authenticated by the cookie alone without a valid
    X-CSRF-Token (see ``_Guards``)."""
    # Logging in needs no token: a stale cookie must not block it. A task's service behind
    # the proxy never sees the master's cookie (the proxy strips it) and keeps its own defence
    # (JupyterLab's XSRF token): its pages' requests carry no X-CSRF-Token of ours.
    if path == "/api/v1/auth/login" or path.startswith("/proxy/"):
        return None
    if any(headers.get(h) for h in _BEARER_HEADERS):
        return None
    token = _cookie(headers.get(b"cookie", b"").decode("latin-1"), "auth")
    sent = headers.get(b"x-csrf-token", b"").decode("latin-1")
    if not token or hmac.compare_digest(sent, csrf_token(token)):
        return None
    message = (
        "this request is authenticated by a cookie but has no valid X-CSRF-Token header; "
        "send the csrfToken of your login, or use 'Authorization: Bearer <token>'"
    )
    return JSONResponse(_error_body(7, message), status_code=403)


def _cookie(header: str, name: str) -> str:
    jar = http.cookies.SimpleCookie()
    try:
        jar.load(header)
    except http.cookies.CookieError:
        return ""
    morsel = jar.get(name)
    return morsel.value if morsel is not None else ""


def _install_error_handlers(app: FastAPI) -> None:
    # JSON nested past what the parsers' recursion allows.
    @app.exception_handler(RecursionError)
    async def _too_deep(_: Request, exc: RecursionError) -> JSONResponse:
        message = "the request is nested too deeply; flatten its JSON"
        return JSONResponse(_error_body(3, message), status_code=400)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(_error_body(exc.code, exc.message), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        # unknown paths and methods: the gateway's body too (NOT_FOUND, UNIMPLEMENTED)
        code = {404: 5, 405: 12}.get(exc.status_code, 2)
        body = _error_body(code, str(exc.detail))
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(_error_body(3, _describe(list(exc.errors()))), status_code=400)

    @app.exception_handler(pydantic.ValidationError)
    async def _invalid_body(_: Request, exc: pydantic.ValidationError) -> JSONResponse:
        return JSONResponse(_error_body(3, _describe(list(exc.errors()))), status_code=400)

    # The database cannot be written (a full disk, a lock held too long): nothing was stored,
    # so the client may try again later; 503 tells the trial client it is safe to.
    @app.exception_handler(sa.exc.OperationalError)
    async def _unavailable(_: Request, exc: sa.exc.OperationalError) -> JSONResponse:
        logger.error("the database failed: %s", exc.orig)
        message = f"the master cannot use its database now ({exc.orig}); nothing was stored"
        return JSONResponse(_error_body(14, message), status_code=503)

    # An id or count past what the database stores (SQLite: OverflowError; Postgres: DataError)
    # is the client's mistake, not a server error.
    @app.exception_handler(OverflowError)
    @app.exception_handler(sa.exc.DataError)
    async def _out_of_range(_: Request, exc: Exception) -> JSONResponse:
        message = "a number in the request is out of range: ids and counts are 64-bit integers"
        return JSONResponse(_error_body(3, message), status_code=400)


class MasterApp(FastAPI):
    """FastAPI behind the master's own front: the Host, CSRF and body-size checks
    (``_Guards``), then the hot routes (``api._hot``), then FastAPI's stack (``serve``).
    Every request passes the checks; the common case of a hot route never enters FastAPI (its
    error middleware, telemetry, routing and dependency solving cost more than the report
    itself)."""

    front: Any = None  # set by create_app
    services: Services  # set by create_app; routers read it through api._services.services
    # The hot routes' common case straight from the HTTP protocol (_http_protocol finds it
    # here); set by create_app.
    hot_lane: HotLane | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.front(scope, receive, send)

    async def serve(self, scope: Any, receive: Any, send: Any) -> None:
        """FastAPI's own stack: exception handlers, routing, dependencies."""
        await super().__call__(scope, receive, send)


def _fastapi_options() -> dict[str, Any]:
    # FastAPI >= 0.16x looks up OpenTelemetry providers on every request unless told not to;
    # the master exports no telemetry. Older versions have no such option.
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    return {}


def create_app(
    store: Store,
    *,
    cluster_name: str = "",
    dev_endpoints: bool = False,
    master_url: str | None = None,
    work_root: Path | None = None,
    cpu_slots: int | None = None,
    slots_per_agent: int | None = None,
    webhooks_config: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = (),
    slurm: dict[str, Any] | None = None,
    log_retention_days: int = -1,
    log_retention_every: float = 86400.0,
    read_workers: int = 0,
    write_worker: bool = False,
    unmanaged_trial_timeout: float = UNMANAGED_TRIAL_TIMEOUT_S,
    sandbox: resources.Sandbox | None = None,
    container_defaults: ContainerDefaults | None = None,
) -> MasterApp:
    """The master's HTTP API over ``store``.

    Args:
        store: an open, migrated :class:`Store`.
        cluster_name: shown by ``/info``.
        dev_endpoints: also serve ``/api/v1/dev/...`` (allocate / preempt / exit a trial's run
            by hand: tests and external launchers; admins only).
        master_url: the URL trials reach this master at. With it (and ``work_root``) the local
            resource manager runs trials while the app serves; without it nothing runs them
            but the dev endpoints.
        work_root: where runs get their work dirs.
        read_workers: processes that answer the heavy reads (the experiment list, an
            experiment, metric series; see ``_read_workers``); 0 answers them in this one.
        write_worker: commit the metric reports in a process of their own (see
            ``ingest._write_worker``); False commits them in this one.
        unmanaged_trial_timeout: seconds after which a running unmanaged trial that sent
            nothing is marked ERROR (0.37: 5 minutes). The first check waits that long after
            start, so trials that spoke into a master that was down are not lost for it.
        cpu_slots, slots_per_agent: see :class:`LocalResourceManager`.
        sandbox: what every trial and task process starts in (``resources._sandbox``; from
            ``task_isolation``); None: no sandbox, every user's tasks run.
        container_defaults: the master config's ``task_container_defaults`` and its pools'
            (``ContainerDefaults``), laid under every new config.
        webhooks_config: the master config's ``webhooks`` section (``signing_key``,
            ``base_url``), see :class:`~determined.master.webhooks.Webhooks`.
        host, allowed_hosts: the bound address and further names requests may carry in
            their Host header (see ``_Guards``).
        slurm: the master config's ``resource_manager`` with ``type: slurm``: trials run as
            Slurm jobs (:class:`SlurmResourceManager`) instead of local processes.
        log_retention_days, log_retention_every: ``retention_policy``: days an ended
            trial's logs are kept unless it has its own (-1: forever), and seconds between
            sweeps.

    The app's routers reach what it built (store, experiments, resource manager, ...) through
    :func:`~determined.master.api._services.services`.
    """
    signals = Signals()
    defaults = container_defaults or ContainerDefaults()
    experiments = Experiments(store, signals)
    experiments.subscribe(on_end=lambda exp_id: resources.collect_async(store, exp_id))
    hooks = webhooks.Webhooks(store, **dict(webhooks_config or {}))
    experiments.on_state_change(hooks.experiment_state_changed)
    experiments.subscribe(on_change=hooks.wake)
    experiments.subscribe(on_change=lambda: signals.notify(STREAM_KEY))

    def on_logs(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
        # Every batch of task log lines, in the transaction that stores it.
        scan_log_policies(conn, rows)
        hooks.task_logs(conn, rows)

    rm: resources.ResourceManager | None = None
    if master_url is not None and work_root is not None and slurm is not None:
        rm = resources.SlurmResourceManager(
            store,
            experiments,
            master_url=master_url,
            work_root=work_root,
            config=resources.SlurmConfig.parse(slurm),
            log_hook=on_logs,
            sandbox=sandbox,
            container_defaults=defaults,
        )
    elif master_url is not None and work_root is not None:
        rm = resources.LocalResourceManager(
            store,
            experiments,
            master_url=master_url,
            work_root=work_root,
            cpu_slots=cpu_slots,
            slots_per_agent=slots_per_agent,
            log_hook=on_logs,
            sandbox=sandbox,
            container_defaults=defaults,
        )

    retention = resources.LogRetention(store, log_retention_days, log_retention_every)
    lost_trials = Periodic(
        "lost-unmanaged-trials",
        lambda: experiments.mark_lost_unmanaged_trials(unmanaged_trial_timeout),
        every=min(60.0, unmanaged_trial_timeout / 5),
        first_after=unmanaged_trial_timeout,
    )
    reads = _read_workers.ReadWorkers(store, read_workers)
    tokens = TokenResolver(store, reads)  # the token cache's refreshes, the hot lane's first reads
    store.tokens.refresh = tokens.refresh
    writer = None
    if write_worker:
        writer = ingest.WriteWorker(store.url, transactions=lambda: store.transactions)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if rm is not None:
            rm.start()
        resources.resume_gc_async(store)  # GC a previous master may have cut short
        hooks.start()
        retention.start()
        lost_trials.start()
        reads.start()
        if writer is not None:
            writer.start()
        yield
        retention.stop()
        lost_trials.stop()
        if rm is not None:
            rm.stop()
        hooks.close()
        tokens.close()
        reads.close()
        if writer is not None:
            writer.close()  # writes still pending then are committed in this process

    app = MasterApp(
        title="redetermined master", version=__version__, lifespan=lifespan, **_fastapi_options()
    )
    services = Services(
        store=store,
        signals=signals,
        experiments=experiments,
        rm=rm,
        webhooks=hooks,
        log_hook=on_logs,
        log_retention=retention,
        reads=reads,
        write_worker=writer,
        ingest=ingest.Ingest(store, signals, experiments, hooks, writer),
        sandbox=sandbox or resources.Sandbox("none", None, "task_isolation: none"),
        container_defaults=defaults,
        stream_stamps=Stamps(),
        master_id=str(uuid.uuid4()),
        cluster_name=cluster_name,
        master_config={"cluster_name": cluster_name},  # the command line sets the rest
    )
    app.services = services
    _install_error_handlers(app)
    # The hot routes come before the untyped-JSON fix: they parse their bodies as JSON
    # whatever the Content-Type, and our own trial client sends none.
    hot = HotRoutes(_UntypedJson(app.serve), services, app.exception_handlers)
    guards = _Guards(hot, allowed=allowed_host_names(host, allowed_hosts), store=store)
    app.front = guards
    app.hot_lane = HotLane(hot, guards.clears, tokens)
    for router in api.ROUTERS:
        app.include_router(router)
    if dev_endpoints:
        app.include_router(api.DEV_ROUTER)
    return app
