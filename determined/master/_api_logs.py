"""Task logs: trials ship lines in batches (``POST /api/v1/task/logs``); readers page them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from determined.master._auth import Caller
from determined.master._deps import StoreDep
from determined.master._errors import InvalidArgument
from determined.master._models import PostTaskLogs
from determined.master._store import _logs, _time

router = APIRouter(prefix="/api/v1")


@router.post("/task/logs")
def post_task_logs(body: PostTaskLogs, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """Store a batch of lines, all of one task (the reference's rule)."""
    tasks = {line.task_id for line in body.logs}
    if len(tasks) > 1:
        raise InvalidArgument(f"a batch of logs must be of one task, not {sorted(tasks)}")
    rows = []
    for line in body.logs:
        caller.check_task(line.task_id)
        try:
            when = _time.parse(line.timestamp) or _time.now()
        except ValueError as e:
            raise InvalidArgument(f"log timestamp {line.timestamp!r} is not RFC 3339") from e
        rows.append(
            {
                "task_id": line.task_id,
                "allocation_id": line.allocation_id,
                "agent_id": line.agent_id,
                "container_id": line.container_id,
                "rank_id": line.rank_id,
                "timestamp": when,
                "level": line.level,
                "stdtype": line.stdtype,
                "source": line.source,
                "log": line.log,
            }
        )
    with store.tx() as conn:
        _logs.append(conn, rows)
    return {}


@router.get("/tasks/{task_id}/logs")
def task_logs(
    task_id: str,
    caller: Caller,
    store: StoreDep,
    limit: int = Query(0, ge=0),
    search_after: int = Query(0, alias="searchAfter", ge=0),
) -> dict[str, Any]:
    """A page of the task's lines (``{logs: [...]}``); streaming readers come with the CLI."""
    caller.check_task(task_id)
    with store.read() as conn:
        rows = _logs.read(conn, task_id, after_id=search_after, limit=limit or None)
    return {"logs": [_logs.log_json(r) for r in rows]}
