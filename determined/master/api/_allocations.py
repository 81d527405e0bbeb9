"""An allocation's signals and barriers: preemption long poll and ack, rendezvous,
all-gather. Long polls are async so that waiting trials hold no worker thread."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from determined.master._errors import FailedPrecondition, InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._deps import SignalsDep, StoreDep
from determined.master.api._models import AckPreemption, AllGather
from determined.master.experiment import preemption_key
from determined.master.store import AllocationRow, Store, _trials

router = APIRouter(prefix="/api/v1/allocations")
MAX_POLL_S = 600


def _allocation(store: Store, allocation_id: str) -> AllocationRow:
    with store.read() as conn:
        return _trials.require_allocation(conn, allocation_id)


@router.get("/{allocation_id}/signals/preemption")
async def preemption(
    allocation_id: str,
    caller: Caller,
    store: StoreDep,
    signals: SignalsDep,
    timeout_seconds: int = Query(0, alias="timeout_seconds", ge=0),
) -> dict[str, Any]:
    """``{preempt}``: true at once if preempted, true when it happens, false at the timeout."""
    caller.check_allocation(allocation_id)
    key = preemption_key(allocation_id)
    event = signals.watch(key)  # before the read, so no signal falls between the two
    try:
        alloc = await run_in_threadpool(_allocation, store, allocation_id)
        if alloc["preempted"] or timeout_seconds == 0:
            return {"preempt": bool(alloc["preempted"])}
        try:
            await asyncio.wait_for(event.wait(), timeout=min(timeout_seconds, MAX_POLL_S))
        except asyncio.TimeoutError:
            pass
        alloc = await run_in_threadpool(_allocation, store, allocation_id)
        return {"preempt": bool(alloc["preempted"])}
    finally:
        signals.unwatch(key, event)


@router.post("/{allocation_id}/signals/ack_preemption")
def ack_preemption(
    allocation_id: str, caller: Caller, store: StoreDep, body: AckPreemption | None = None
) -> dict[str, Any]:
    """The trial will exit 0 because it was preempted or ran out of operations."""
    caller.check_allocation(allocation_id)
    with store.tx() as conn:
        _trials.require_allocation(conn, allocation_id)
        _trials.update_allocation(conn, allocation_id, acked=True)
    return {}


def _mark_ready(store: Store, allocation_id: str) -> None:
    with store.tx() as conn:
        _trials.update_allocation(conn, allocation_id, ready=True)


@router.get("/{allocation_id}/resources/{resources_id}/rendezvous")
async def rendezvous(
    allocation_id: str, resources_id: str, caller: Caller, store: StoreDep, signals: SignalsDep
) -> dict[str, Any]:
    """Blocks until every container of the allocation called; chief first, then by id."""
    caller.check_allocation(allocation_id)
    alloc = await run_in_threadpool(_allocation, store, allocation_id)
    resources = list(alloc["resources"] or [])
    ids = [str(r.get("resourcesId", i)) for i, r in enumerate(resources)] or [resources_id]
    if resources_id not in ids:
        raise InvalidArgument(f"allocation {allocation_id} has no resources {resources_id!r}")
    barrier = signals.barrier(allocation_id, "rendezvous", len(ids))
    barrier.arrive(resources_id, True)
    await barrier.done.wait()
    _check_not_dropped(barrier, allocation_id)
    await run_in_threadpool(_mark_ready, store, allocation_id)
    by_id = {str(r.get("resourcesId", i)): r for i, r in enumerate(resources)}
    return {
        "rendezvousInfo": {
            "addresses": [str(by_id.get(i, {}).get("address", "127.0.0.1")) for i in ids],
            "rank": ids.index(resources_id),
            "slots": [int(by_id.get(i, {}).get("slots", 1)) for i in ids],
        }
    }


@router.post("/{allocation_id}/all_gather")
async def all_gather(
    allocation_id: str, body: AllGather, caller: Caller, store: StoreDep, signals: SignalsDep
) -> dict[str, Any]:
    """``{data: [...]}``: every peer's data once ``numPeers`` peers posted the same uuid."""
    caller.check_allocation(allocation_id)
    if body.num_peers < 1:
        raise InvalidArgument(f"numPeers must be at least 1, not {body.num_peers}")
    await run_in_threadpool(_allocation, store, allocation_id)
    barrier = signals.barrier(allocation_id, f"gather:{body.request_uuid}", body.num_peers)
    barrier.arrive(str(len(barrier.values)), body.data)
    await barrier.done.wait()
    _check_not_dropped(barrier, allocation_id)
    return {"data": list(barrier.values.values())}


def _check_not_dropped(barrier: Any, allocation_id: str) -> None:
    if barrier.dropped:
        raise FailedPrecondition(
            f"allocation {allocation_id} ended before every participant arrived"
        )
