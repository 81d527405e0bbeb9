"""FastAPI dependencies shared by the routers: the store, the experiments, the signals, the
webhooks.

``async`` because FastAPI runs a plain ``def`` dependency in the thread pool: a hop per
dependency per request, for reading an attribute.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from determined.master._signals import Signals
from determined.master.experiment import Experiments
from determined.master.store import Store
from determined.master.webhooks import Webhooks


async def _store(request: Request) -> Store:
    return request.app.state.store


async def _experiments(request: Request) -> Experiments:
    return request.app.state.experiments


async def _signals(request: Request) -> Signals:
    return request.app.state.signals


async def _webhooks(request: Request) -> Webhooks:
    return request.app.state.webhooks


StoreDep = Annotated[Store, Depends(_store)]
ExperimentsDep = Annotated[Experiments, Depends(_experiments)]
SignalsDep = Annotated[Signals, Depends(_signals)]
WebhooksDep = Annotated[Webhooks, Depends(_webhooks)]
