"""The redetermined master: HTTP API, experiments, search, store, local resource manager.

Run it with ``python -m determined.master --port 8080``; embed it with
``create_app(Store(url))``. Names load lazily so that ``determined.master.searcher`` (used by
the CLI's preview) does not import the web stack.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Experiments", "Store", "create_app", "sqlite_url"]

_WHERE = {
    "Experiments": "determined.master.experiment",
    "Store": "determined.master.store",
    "create_app": "determined.master._app",
    "sqlite_url": "determined.master.store",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'determined.master' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
