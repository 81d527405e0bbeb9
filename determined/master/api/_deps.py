"""FastAPI dependencies shared by the routers: the store, the experiments, the signals, the
webhooks (each one of the app's :class:`~determined.master.api._services.Services`).

``async`` because FastAPI runs a plain ``def`` dependency in the thread pool: a hop per
dependency per request, for reading an attribute.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from pydantic import AfterValidator

from determined.master._read_workers import ReadWorkers
from determined.master._signals import Signals
from determined.master.api._services import services
from determined.master.experiment import Experiments
from determined.master.resources import ResourceManager
from determined.master.resources._log_capture import LogHook
from determined.master.store import Store
from determined.master.webhooks import Webhooks


async def _store(request: Request) -> Store:
    return services(request).store


async def _experiments(request: Request) -> Experiments:
    return services(request).experiments


async def _signals(request: Request) -> Signals:
    return services(request).signals


async def _resource_manager(request: Request) -> ResourceManager | None:
    return services(request).rm


async def _webhooks(request: Request) -> Webhooks:
    return services(request).webhooks


async def _log_hook(request: Request) -> LogHook:
    return services(request).log_hook


async def _reads(request: Request) -> ReadWorkers:
    return services(request).reads


StoreDep = Annotated[Store, Depends(_store)]
ExperimentsDep = Annotated[Experiments, Depends(_experiments)]
SignalsDep = Annotated[Signals, Depends(_signals)]
WebhooksDep = Annotated[Webhooks, Depends(_webhooks)]
ResourceManagerDep = Annotated[ResourceManager | None, Depends(_resource_manager)]
# What every stored batch of task log lines goes through (log policies, webhooks), in its
# transaction.
LogHookDep = Annotated[LogHook, Depends(_log_hook)]
# Where heavy reads are answered (worker processes, or this one): see _read_workers.
ReadsDep = Annotated[ReadWorkers, Depends(_reads)]

# ``limit`` on every listing: N items, 0 or -1 all (0.37's clients send -1 for "everything").
# Handlers see 0 for both.
Limit = Annotated[
    int,
    Query(ge=-1, description="at most this many items; 0 or -1: all"),
    AfterValidator(lambda v: max(v, 0)),
]
