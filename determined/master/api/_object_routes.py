"""Routes of one object found by the key in its path (a workspace, a project, a model), written
once here: its GET, and the route pairs that turn one of its flags on and off
(archive/unarchive, pin/unpin). The object's own rules stay in the function each is given."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from fastapi import APIRouter

from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import StoreDep
from determined.master.store import Store

# (store, caller, the object's key from the path, the flag's new value).
Setter = TypeVar("Setter", bound=Callable[[Store, Principal, Any, bool], None])
# (a read connection, the object's key from the path) -> the route's answer.
Answer = Callable[[sa.Connection, Any], dict[str, Any]]


def _route(
    router: APIRouter,
    method: str,
    path: str,
    name: str,
    doc: str | None,
    key: tuple[str, Any],
    run: Callable[[Principal, Store, Any], dict[str, Any]],
) -> None:
    """Adds the route ``name`` that calls ``run(caller, store, key)`` with the path's parameter
    ``key`` (its name and type)."""
    key_name, kind = key
    if f"{{{key_name}}}" not in path:
        raise ValueError(f"path {path!r} has no {{{key_name}}} for {name}")

    def handler(*, caller: Principal, store: Store, **ids: Any) -> dict[str, Any]:
        return run(caller, store, ids[key_name])

    # FastAPI reads the route's parameters (the path's key, the caller, the store) from here.
    handler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(key_name, inspect.Parameter.KEYWORD_ONLY, annotation=kind),
            inspect.Parameter("caller", inspect.Parameter.KEYWORD_ONLY, annotation=Caller),
            inspect.Parameter("store", inspect.Parameter.KEYWORD_ONLY, annotation=StoreDep),
        ],
        return_annotation=dict[str, Any],
    )
    handler.__name__ = handler.__qualname__ = name
    handler.__doc__ = doc
    router.api_route(path, methods=[method])(handler)


def get_route(
    router: APIRouter, path: str, name: str, answer: Answer, key: tuple[str, Any]
) -> None:
    """Serves ``GET {path}`` (handler ``name``) to any user: ``answer``, in a read, for the
    path's parameter ``key`` (its name and type: ``("project_id", int)``)."""

    def run(caller: Principal, store: Store, value: Any) -> dict[str, Any]:
        caller.require_user()
        with store.read() as conn:
            return answer(conn, value)

    _route(router, "GET", path, name, None, key, run)


def flag_routes(
    router: APIRouter, path: str, names: tuple[str, str], doc_on: str | None = None
) -> Callable[[Setter], Setter]:
    """Serves the setter it decorates as ``POST {path}/{on}`` and ``POST {path}/{off}``, which
    call it with True and with False and answer ``{}``.

    Args:
        path: the object's path; it holds the setter's third parameter (``{workspace_id}``),
            which the routes take with that parameter's type.
        names: the handlers' (the OpenAPI operations') names of the "on" route and the "off"
            one, each its verb, ``_`` and the object (``("pin_workspace", "unpin_workspace")``).
        doc_on: the "on" route's description.
    """

    def register(set_flag: Setter) -> Setter:
        key = list(inspect.signature(set_flag).parameters)[2]
        kind = typing.get_type_hints(set_flag)[key]
        for name, to, doc in zip(names, (True, False), (doc_on, None), strict=True):

            def run(caller: Principal, store: Store, value: Any, _to: bool = to) -> dict[str, Any]:
                set_flag(store, caller, value, _to)
                return {}

            verb = name.split("_", 1)[0]
            _route(router, "POST", f"{path}/{verb}", name, doc, (key, kind), run)
        return set_flag

    return register
