"""``create_app``: the master's FastAPI application over a ``Store``."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from determined._version import __version__
from determined.master import (
    _api_allocations,
    _api_auth,
    _api_checkpoints,
    _api_dev,
    _api_experiments,
    _api_logs,
    _api_trials,
)
from determined.master._errors import ApiError
from determined.master._experiment import Experiments
from determined.master._signals import Signals
from determined.master._store import Store

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


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(_error_body(exc.code, exc.message), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(_error_body(3, _describe(list(exc.errors()))), status_code=400)

    @app.exception_handler(pydantic.ValidationError)
    async def _invalid_body(_: Request, exc: pydantic.ValidationError) -> JSONResponse:
        return JSONResponse(_error_body(3, _describe(list(exc.errors()))), status_code=400)


def create_app(store: Store, *, cluster_name: str = "", dev_endpoints: bool = False) -> FastAPI:
    """The master's HTTP API over ``store``.

    Args:
        store: an open, migrated :class:`Store`.
        cluster_name: shown by ``/info``.
        dev_endpoints: also serve ``/api/v1/dev/...`` (allocate / preempt / exit a trial's run
            by hand: tests and external launchers; admins only).

    The app's state holds ``store``, ``experiments`` (:class:`Experiments`) and ``signals``;
    the resource manager reaches experiments through ``app.state.experiments``.
    """
    app = FastAPI(title="redetermined master", version=__version__)
    app.state.store = store
    app.state.signals = Signals()
    app.state.experiments = Experiments(store, app.state.signals)
    app.state.master_id = str(uuid.uuid4())
    app.state.cluster_name = cluster_name
    _install_error_handlers(app)
    for module in (
        _api_auth,
        _api_trials,
        _api_checkpoints,
        _api_allocations,
        _api_logs,
        _api_experiments,
    ):
        app.include_router(module.router)
    if dev_endpoints:
        app.include_router(_api_dev.router)
    return app
