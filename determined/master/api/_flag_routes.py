"""Route pairs that turn one flag of one object on and off (archive/unarchive, pin/unpin): the
two routes are written once here; the object's own rules stay in its setter."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter

from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import StoreDep
from determined.master.store import Store

# (store, caller, the object's key from the path, the flag's new value).
Setter = TypeVar("Setter", bound=Callable[[Store, Principal, Any, bool], None])


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
        if f"{{{key}}}" not in path:
            raise ValueError(f"path {path!r} has no {{{key}}} for {set_flag.__name__}")
        params = [
            inspect.Parameter(
                key, inspect.Parameter.KEYWORD_ONLY, annotation=typing.get_type_hints(set_flag)[key]
            ),
            inspect.Parameter("caller", inspect.Parameter.KEYWORD_ONLY, annotation=Caller),
            inspect.Parameter("store", inspect.Parameter.KEYWORD_ONLY, annotation=StoreDep),
        ]
        for name, to, doc in zip(names, (True, False), (doc_on, None), strict=True):

            def handler(*, caller: Principal, store: Store, _to: bool = to, **ids: Any) -> Any:
                set_flag(store, caller, ids[key], _to)
                return {}

            # FastAPI reads the route's parameters (the path's key, the caller, the store) here.
            handler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
                params, return_annotation=dict[str, Any]
            )
            handler.__name__ = handler.__qualname__ = name
            handler.__doc__ = doc
            router.post(f"{path}/{name.split('_', 1)[0]}")(handler)
        return set_flag

    return register
