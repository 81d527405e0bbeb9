"""A custom search's runner talks to the master here (0.37's ``GetSearcherEvents`` and
``PostSearcherOperations``): it long-polls the pending searcher events and posts the
operations that answer each one (docs/reference/custom_searchers.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._deps import ExperimentsDep, SignalsDep, StoreDep
from determined.master.experiment import searcher_events_key
from determined.master.store import State

router = APIRouter(prefix="/api/v1/experiments")
# 0.37 answers an empty list after 60 s without events
POLL_S = 60.0


def _inactive(state: State) -> bool:
    """The runner stops (or, paused, waits) on these: 0.37 sends no events in them."""
    return state.is_terminal or state == State.PAUSED


@router.get("/{experiment_id}/searcher_events")
async def get_searcher_events(
    experiment_id: int, caller: Caller, exps: ExperimentsDep, signals: SignalsDep
) -> dict[str, Any]:
    """``{searcherEvents}``: the pending events, as soon as there are any (at most 60 s);
    a lone ``experimentInactive`` event with id -1 when the experiment is paused or ended."""
    caller.check_experiment(experiment_id)
    key = searcher_events_key(experiment_id)
    watch = signals.watch(key)  # before the read, so no event falls between the two
    try:
        state, events = await run_in_threadpool(exps.searcher_events, experiment_id)
        if not events and not _inactive(state):
            try:
                await asyncio.wait_for(watch.wait(), timeout=POLL_S)
            except asyncio.TimeoutError:
                pass
            state, events = await run_in_threadpool(exps.searcher_events, experiment_id)
        if _inactive(state):
            return {
                "searcherEvents": [
                    {"id": -1, "experimentInactive": {"experimentState": state.value}}
                ]
            }
        return {"searcherEvents": events}
    finally:
        signals.unwatch(key, watch)


class PostSearcherOperations(BaseModel):
    """``v1PostSearcherOperationsRequest``."""

    model_config = ConfigDict(extra="ignore")

    experimentId: int | None = None
    searcherOperations: list[dict[str, Any]] | None = None
    triggeredByEvent: dict[str, Any] | None = None


@router.post("/{experiment_id}/searcher_operations")
def post_searcher_operations(
    experiment_id: int,
    body: PostSearcherOperations,
    caller: Caller,
    exps: ExperimentsDep,
    store: StoreDep,
) -> dict[str, Any]:
    """Carry out the operations; ``triggeredByEvent.id`` acknowledges that event and every
    earlier one (they are no longer returned)."""
    caller.check_owner(store, experiment_id, "post searcher operations to")
    if body.experimentId is not None and body.experimentId != experiment_id:
        raise InvalidArgument(
            f"body experimentId {body.experimentId} does not match experiment {experiment_id}"
        )
    triggered_by = None
    if body.triggeredByEvent is not None:
        raw = body.triggeredByEvent.get("id")
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise InvalidArgument(
                "triggeredByEvent.id must be the integer id of the event these operations answer"
            )
        triggered_by = raw
    exps.post_searcher_operations(experiment_id, list(body.searcherOperations or []), triggered_by)
    return {}
