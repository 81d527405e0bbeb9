"""Hot routes: the calls every running trial makes several times a second (its metric reports),
answered without FastAPI's routing and dependency solving.

Why: a metric report's own work (parse, check the token, one group-committed write) is a
fraction of what FastAPI spends around it: matching the path against every route, solving
the dependencies, building a ``Request``. At 2,000 reports a second that overhead alone fills
a core (``benchmarks/master_metrics.py``).

How: ``HotRoutes`` is the innermost middleware (inside the Host, CSRF and body-size checks).
It serves a request itself only in the common case: a POST to a hot path, with an allocation
token already in the token cache that belongs to the trial in the path, and a body that parses
into the route's model. Anything else (no or unknown token, a user's token, a body that fails
to parse) goes on to the FastAPI route with the body it already read, so error answers and
every rule stay in one place: the route. The work itself is the route's own function
(``_trials.record_report``: parse, then hand the report to ``master/ingest``); errors it raises
are answered by the app's exception handlers.

``HotLane`` takes the same common case one step earlier, from the HTTP protocol itself
(``_http_protocol``), when the request's head also clears the master's checks in front
(``_app._Guards.clears``): no ASGI scope, task, receive/send messages or middleware for it,
and its answer is written straight to the connection. At 8,000 reports a second that
machinery was most of the master's CPU per report (``benchmarks/master_metrics.py``). Whatever
it does not take (a body that fails to parse, a validation) goes to the application with the
body already read, and an error is answered by the same exception handlers.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pydantic
from starlette.requests import Request

from determined.master.api import _auth, _trials
from determined.master.api._models import (
    ReportMetrics,
    ReportTrainingMetrics,
    ReportValidationMetrics,
    TrialMetrics,
)
from determined.master.api._services import Services
from determined.master.store import Store, _users

# POST /api/v1/trials/{id}/<route>: how to read the group and the report from its body.
_REPORTS: dict[str, Callable[[bytes], tuple[str, TrialMetrics]]] = {}


def _metrics(raw: bytes) -> tuple[str, TrialMetrics]:
    body = ReportMetrics.model_validate_json(raw)
    return body.group, body.metrics


def _training(raw: bytes) -> tuple[str, TrialMetrics]:
    return "training", ReportTrainingMetrics.model_validate_json(raw).training_metrics


def _validation(raw: bytes) -> tuple[str, TrialMetrics]:
    return "validation", ReportValidationMetrics.model_validate_json(raw).validation_metrics


_REPORTS.update(metrics=_metrics, training_metrics=_training, validation_metrics=_validation)
# ASCII digits only, as the route's int parameter; anything else takes the FastAPI route.
_REPORT_PATH = re.compile(
    r"/api/v1/trials/([0-9]{1,18})/(metrics|training_metrics|validation_metrics)"
)
# The same path as the request line's raw bytes (HotLane): no query string, no escapes.
_REPORT_URL = re.compile(_REPORT_PATH.pattern.encode())

_OK_HEADERS = [(b"content-length", b"2"), (b"content-type", b"application/json")]

# Starlette's exception handler: (request, error) -> a response, or an awaitable of one.
Handler = Callable[[Request, Any], Any]


class HotRoutes:
    """ASGI middleware serving the hot routes' common case (see module doc).

    Args:
        app: the rest of the application.
        services: the app's services (its store, its ingestion).
        handlers: the app's exception handlers (``FastAPI.exception_handlers``; the same
            mapping, so handlers installed later count).
    """

    def __init__(self, app: Any, services: Services, handlers: Mapping[Any, Handler]) -> None:
        self.app = app
        self.services = services
        self.handlers = handlers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        match = _REPORT_PATH.fullmatch(scope["path"])
        if match is None:
            await self.app(scope, receive, send)
            return
        trial_id = int(match.group(1))
        if not self.reporter_cached(trial_id, dict(scope["headers"])):
            await self.app(scope, receive, send)  # the route answers 401/403 or resolves it
            return
        raw = await _read_body(receive)
        if raw is None:  # the client went away, or the body limit cut it off
            return
        try:
            group, report = _REPORTS[match.group(2)](raw)
        except pydantic.ValidationError:
            # The route answers with its own message: hand it the body already read.
            await self.app(scope, _replay(raw, receive), send)
            return
        try:
            await _trials.record_report(self.services, trial_id, group, report)
        except Exception as e:  # noqa: BLE001 - answered as the app answers it, or re-raised
            await self.answer_error(e, scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": _OK_HEADERS})
        await send({"type": "http.response.body", "body": b"{}"})

    def reporter_cached(self, trial_id: int, headers: Mapping[bytes, bytes]) -> bool:
        """Whether the request's token is in the token cache, an allocation's, of
        ``trial_id``: the common case (anything else takes the route)."""
        principal = _cached_allocation(self.services.store, headers)
        return principal is not None and _reports_for(principal, trial_id)

    async def answer_error(self, error: BaseException, scope: Any, receive: Any, send: Any) -> None:
        """Answer ``error`` raised while storing a report as the app's exception handlers
        answer it (re-raised when none handles it: a 500)."""
        handler = self._handler_for(error)
        if handler is None:
            raise error
        response = handler(Request(scope, receive), error)
        if inspect.isawaitable(response):
            response = await response
        await response(scope, receive, send)

    def _handler_for(self, error: BaseException) -> Handler | None:
        for cls in type(error).__mro__:
            if cls in self.handlers:
                return self.handlers[cls]
        return None


# A request HotLane took: (trial id, route name, the token to read first: (token, digest), or
# None when the cache holds it), see HotLane.take.
Ticket = tuple[int, str, tuple[str, str] | None]


class HotLane:
    """The hot routes' common case taken from the HTTP protocol, before any ASGI machinery
    (see module doc). ``take`` looks at a request's head, ``run`` at its body.

    A token the cache does not hold yet (a trial's first report, or the first after the master
    started) is read by ``resolver`` with the others asked for meanwhile, then the report goes
    on in the lane if the token is the trial's allocation's, else to the application.

    Args:
        routes: the app's hot routes (their token check and error answers).
        clears: whether a request's headers pass the master's checks in front for sure
            (``_app._Guards.clears``).
        resolver: reads tokens the cache does not hold (None: such requests go to the
            application).
    """

    def __init__(
        self,
        routes: HotRoutes,
        clears: Callable[[Mapping[bytes, bytes]], bool],
        resolver: _auth.TokenResolver | None = None,
    ) -> None:
        self.routes, self.clears, self.resolver = routes, clears, resolver

    def take(self, url: bytes, headers: list[tuple[bytes, bytes]]) -> Ticket | None:
        """The ticket of a POST to ``url`` with ``headers`` (names lowercased) that is the
        common case, else None (the application serves the request)."""
        match = _REPORT_URL.fullmatch(url)
        if match is None:
            return None
        named = dict(headers)
        if not self.clears(named):
            return None
        token = _request_token(named)
        if token is None:
            return None
        trial_id = int(match.group(1))
        principal = self.routes.services.store.tokens.get(token[1])
        if principal is None:  # not read yet: the resolver reads it, if there is one
            return None if self.resolver is None else (trial_id, match.group(2).decode(), token)
        if principal.is_allocation and _reports_for(principal, trial_id):
            return trial_id, match.group(2).decode(), None
        return None  # a user's token, or another trial's: the application answers

    def run(
        self,
        ticket: Ticket,
        raw: bytes,
        done: Callable[[BaseException | None], None],
        to_app: Callable[[], None],
    ) -> None:
        """Store the report in ``raw`` (call from the event loop); ``done(None)`` once it is
        stored, ``done(error)`` once it is refused (answer with :meth:`HotRoutes.answer_error`),
        or ``to_app()`` when the lane does not take it after all (a body that does not parse, a
        validation, a token that is not the trial's allocation's): the application serves the
        request then. Exactly one of them is called, now or later."""
        trial_id, route, unread = ticket
        if unread is None:
            self._store(trial_id, route, raw, done, to_app)
            return
        token, digest = unread

        def resolved() -> None:
            principal = self.routes.services.store.tokens.get(digest)
            if principal is None or not _reports_for(principal, trial_id):
                to_app()  # not the trial's allocation's token: the app answers why
            else:
                try:
                    self._store(trial_id, route, raw, done, to_app)
                except Exception as e:  # noqa: BLE001 - answered as the app answers it
                    done(e)

        assert self.resolver is not None
        self.resolver.resolve_soon(token, digest, resolved)

    def _store(
        self,
        trial_id: int,
        route: str,
        raw: bytes,
        done: Callable[[BaseException | None], None],
        to_app: Callable[[], None],
    ) -> None:
        try:
            group, body = _REPORTS[route](raw)
        except Exception:  # noqa: BLE001 - the route answers with its own message
            to_app()
            return
        if group == "validation":
            to_app()  # the searcher waits for it: the route's coroutine
            return
        try:
            report = _trials.parsed_report(trial_id, group, body)
        except Exception as e:  # noqa: BLE001 - answered as the app answers it
            done(e)
            return
        self.routes.services.ingest.record_soon(report, done)


def _reports_for(principal: _auth.Principal, trial_id: int) -> bool:
    """Whether ``principal`` is the allocation's of ``trial_id`` (a user's has no trial)."""
    return principal.trial is not None and int(principal.trial["id"]) == trial_id


def _request_token(headers: Mapping[bytes, bytes]) -> tuple[str, str] | None:
    """(token, digest) of the request's bearer token (_auth.bearer_token's rule, on the raw
    header values), or None."""
    for name in _TOKEN_HEADERS:
        value = headers.get(name)
        if value and (token := _header_token(value)) is not None:
            return token
    return None


def _cached_allocation(store: Store, headers: Mapping[bytes, bytes]) -> _auth.Principal | None:
    """The principal of the request's token if the token cache holds it and it is an
    allocation's; None sends the request the slow way (which reads the database)."""
    token = _request_token(headers)
    principal: _auth.Principal | None = None if token is None else store.tokens.get(token[1])
    if principal is None or not principal.is_allocation:
        return None
    return principal


_TOKEN_HEADERS = tuple(h.encode() for h in _auth.TOKEN_HEADERS)


# A header's token and its digest, remembered: a trial sends the same header with each of its
# reports, and reading and hashing it was a few percent of the master's CPU per report.
@functools.lru_cache(maxsize=16384)
def _header_token(value: bytes) -> tuple[str, str] | None:
    """(token, digest) of the bearer token in one token header's raw ``value`` (None: none)."""
    token = _auth.bearer_of(value.decode("latin-1"))
    return None if token is None else (token, _users.token_digest(token))


async def _read_body(receive: Any) -> bytes | None:
    """The whole body, or None if the client disconnected (or the body limit cut it off)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(raw: bytes, receive: Any) -> Callable[[], Awaitable[Any]]:
    """``receive`` for the route: the body already read, then whatever comes after it."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replay
