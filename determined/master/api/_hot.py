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
"""

from __future__ import annotations

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
        principal = _cached_allocation(self.services.store, scope["headers"])
        if principal is None or principal.trial is None or int(principal.trial["id"]) != trial_id:
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
            handler = self._handler_for(e)
            if handler is None:
                raise
            response = handler(Request(scope, receive), e)
            if inspect.isawaitable(response):
                response = await response
            await response(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": _OK_HEADERS})
        await send({"type": "http.response.body", "body": b"{}"})

    def _handler_for(self, error: Exception) -> Handler | None:
        for cls in type(error).__mro__:
            if cls in self.handlers:
                return self.handlers[cls]
        return None


def _cached_allocation(store: Store, headers: list[tuple[bytes, bytes]]) -> _auth.Principal | None:
    """The principal of the request's token if the token cache holds it and it is an
    allocation's; None sends the request the slow way (which reads the database)."""
    named = {k: v for k, v in headers if k in _auth.HEADER_NAMES}
    token = _auth.bearer_token(lambda name: _text(named.get(name.encode())))
    if token is None:
        return None
    principal: _auth.Principal | None = store.tokens.get(_users.token_digest(token))
    if principal is None or not principal.is_allocation:
        return None
    return principal


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


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
