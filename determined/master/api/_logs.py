"""Task logs: trials ship lines in batches (``POST /api/v1/task/logs``); readers page them."""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from determined.master._errors import InvalidArgument, NotFound, PermissionDenied
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import Limit, LogHookDep, ReadsDep, StoreDep
from determined.master.api._models import PostTaskLogs
from determined.master.experiment import State
from determined.master.store import Store, _experiments, _logs, _tasks, _time, _trials

router = APIRouter(prefix="/api/v1")
FOLLOW_POLL_S = 0.25
FOLLOW_GRACE_S = 1.0  # a follow stream ends this long after the trial is terminal and quiet


@router.post("/task/logs")
def post_task_logs(
    body: PostTaskLogs, caller: Caller, store: StoreDep, on_logs: LogHookDep
) -> dict[str, Any]:
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
        if rows:
            _check_log_writer(conn, caller, str(rows[0]["task_id"]))
        _logs.append(conn, rows)
        on_logs(conn, rows)
    return {}


def _check_log_writer(conn: sa.Connection, caller: Principal, task_id: str) -> None:
    """Who may add lines to a task's logs: its own allocation's token (checked per line), its
    owner (a trial's experiment's owner: unmanaged trials and the reference's harness send the
    user's token), or an admin. Nobody else writes into another user's logs."""
    if caller.is_allocation or caller.info.admin:
        return
    trial = _trials.trial_by_task(conn, task_id)
    if trial is not None:
        owner: int | None = _experiments.owner_of(conn, int(trial["experiment_id"]))
    else:
        task = _tasks.get(conn, task_id)
        if task is None:
            raise NotFound(f"task {task_id} not found")
        owner = int(task["owner_id"])
    if owner != caller.info.user_id:
        raise PermissionDenied(
            f"task {task_id} is another user's: only its own processes, its owner or an admin "
            "may add to its logs"
        )


@dataclasses.dataclass
class LogFilter:
    """0.37's log filters (``TrialLogs``/``TaskLogs`` query): a line is kept when it matches
    every filter given; a line without a level counts as INFO, as it is shown."""

    agent_ids: list[str] = Query(default=[], alias="agentIds")
    container_ids: list[str] = Query(default=[], alias="containerIds")
    allocation_ids: list[str] = Query(default=[], alias="allocationIds")
    rank_ids: list[int] = Query(default=[], alias="rankIds")
    levels: list[str] = Query(default=[])
    stdtypes: list[str] = Query(default=[])
    sources: list[str] = Query(default=[])
    timestamp_before: str | None = Query(None, alias="timestampBefore")
    timestamp_after: str | None = Query(None, alias="timestampAfter")
    search_text: str = Query("", alias="searchText")

    def _times(self) -> tuple[datetime.datetime | None, datetime.datetime | None]:
        try:
            return _time.parse(self.timestamp_before), _time.parse(self.timestamp_after)
        except ValueError as e:
            raise InvalidArgument(
                "timestampBefore/timestampAfter must be RFC 3339 times (2021-10-26T23:17:12Z)"
            ) from e

    def is_empty(self) -> bool:
        """No filter given: every line is kept."""
        return not any(
            (
                self.agent_ids,
                self.container_ids,
                self.allocation_ids,
                self.rank_ids,
                self.levels,
                self.stdtypes,
                self.sources,
                self.timestamp_before,
                self.timestamp_after,
                self.search_text,
            )
        )

    def keep(self) -> Callable[[dict[str, Any]], bool]:
        before, after = self._times()
        columns = (
            ("agent_id", set(self.agent_ids)),
            ("container_id", set(self.container_ids)),
            ("allocation_id", set(self.allocation_ids)),
            ("stdtype", set(self.stdtypes)),
            ("source", set(self.sources)),
        )
        ranks = set(self.rank_ids)

        def keep(row: dict[str, Any]) -> bool:
            if any(wanted and row[col] not in wanted for col, wanted in columns):
                return False
            # Rank -1 stands for a line without a rank (0.37's "in or null" filter).
            if ranks and (-1 if row["rank_id"] is None else row["rank_id"]) not in ranks:
                return False
            if self.levels and (row["level"] or "LOG_LEVEL_INFO") not in self.levels:
                return False
            when = _time.as_utc(row["timestamp"])
            if (before is not None and when >= before) or (after is not None and when <= after):
                return False
            return not self.search_text or self.search_text in row["log"]

        return keep


@router.get("/tasks/{task_id}/logs", response_model=None)
def task_logs(
    task_id: str,
    caller: Caller,
    store: StoreDep,
    limit: Limit = 0,
    search_after: int = Query(0, alias="searchAfter", ge=0),
    filters: LogFilter = Depends(),
    follow: bool | None = None,
    order_by: str = Query("ORDER_BY_ASC", alias="orderBy"),
) -> dict[str, Any] | StreamingResponse:
    """A page of the task's lines (``{logs: [...]}``) for our CLI's paging (with filters: up
    to ``limit`` matching lines after ``searchAfter``); with ``follow`` given (0.37's
    ``TaskLogs``, as its CLI always sends it) NDJSON ``{"result": v1TaskLogsResponse}`` lines
    instead, and with ``follow=true`` new lines until the task ends and is quiet."""
    caller.check_task(task_id)
    with store.read() as conn:
        if not _logs.task_known(conn, task_id) and _tasks.get(conn, task_id) is None:
            raise NotFound(f"task {task_id} not found")
    keep = filters.keep()
    if follow is None:
        found: list[dict[str, Any]] = []
        after = search_after
        with store.read() as conn:
            while True:
                rows = _logs.read(conn, task_id, after_id=after, limit=limit or None)
                found += [r for r in rows if keep(r)]
                if not rows or not limit or len(found) >= limit:
                    break
                after = rows[-1]["id"]
        return {"logs": [_logs.log_json(r) for r in (found[:limit] if limit else found)]}
    desc = order_by in ("ORDER_BY_DESC", "desc")
    return StreamingResponse(
        _task_lines(store, task_id, limit, desc, follow, keep), media_type="application/json"
    )


@router.get("/tasks/{task_id}/logs/fields")
def task_log_fields(
    task_id: str, caller: Caller, store: StoreDep, follow: bool = False
) -> StreamingResponse:
    """NDJSON ``{"result": v1TaskLogsFieldsResponse}``: the values the task's lines may be
    filtered on; with ``follow``, again whenever they change, until the task ends and is
    quiet (0.37's ``TaskLogsFields``)."""
    caller.check_task(task_id)
    with store.read() as conn:
        if not _logs.task_known(conn, task_id) and _tasks.get(conn, task_id) is None:
            raise NotFound(f"task {task_id} not found")
    lines = _field_lines(
        store, task_id, follow, lambda conn: _task_ended(conn, task_id), _logs.FIELD_COLUMNS
    )
    return StreamingResponse(lines, media_type="application/json")


def _field_lines(
    store: Store,
    task_id: _logs.TaskIds,
    follow: bool,
    ended: Callable[[Any], bool],
    keys: Iterable[str],
) -> Iterator[bytes]:
    """The task's log fields (only ``keys``) now, then with ``follow`` each change until
    ``ended`` holds and nothing changed for ``FOLLOW_GRACE_S``."""
    wanted = set(keys)
    last: dict[str, list[Any]] | None = None
    quiet_since: float | None = None
    while True:
        with store.read() as conn:
            found = {k: v for k, v in _logs.fields(conn, task_id).items() if k in wanted}
            done = ended(conn)
        if found != last:
            yield (json.dumps({"result": found}) + "\n").encode()
            last, quiet_since = found, None
        if not follow:
            return
        if not done:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= FOLLOW_GRACE_S:
            return
        time.sleep(FOLLOW_POLL_S)


def task_log_response(row: dict[str, Any]) -> dict[str, Any]:
    """``v1TaskLogsResponse``: the stored line plus 0.37's formatted ``message``."""
    when = _time.rfc3339(_time.as_utc(row["timestamp"]))
    container = (row["container_id"] or "")[:8].ljust(8)
    rank = "" if row["rank_id"] is None else f"[rank={row['rank_id']}] "
    level = str(row["level"] or "LOG_LEVEL_INFO").removeprefix("LOG_LEVEL_")
    return {
        **_logs.log_json(row),
        "id": str(row["id"]),
        # 0.37's clients parse the level as an enum: a line without one is UNSPECIFIED.
        "level": row["level"] or "LOG_LEVEL_UNSPECIFIED",
        "message": f"[{when}] {container} {rank}|| {level}: {row['log']}",
    }


def _task_ended(conn: Any, task_id: str) -> bool:
    row = _tasks.get(conn, task_id)
    if row is not None:
        return row["state"] not in _tasks.LIVE
    return not any(a["task_id"] == task_id for a in _trials.live_allocations(conn))


def _task_lines(
    store: Store,
    task_id: str,
    limit: int,
    desc: bool,
    follow: bool,
    keep: Callable[[dict[str, Any]], bool],
) -> Iterator[bytes]:
    """The task's kept lines (``limit`` of them, newest first if ``desc``), then with
    ``follow`` the lines that come after them until the task has ended."""
    return _log_lines(
        store,
        task_id,
        lambda rows: _select(rows, 0, 0, limit, desc),
        follow,
        keep,
        render=task_log_response,
        ended=lambda conn: _task_ended(conn, task_id),
    )


def _log_lines(
    store: Store,
    task_id: _logs.TaskIds,
    picked: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    follow: bool,
    keep: Callable[[dict[str, Any]], bool],
    *,
    render: Callable[[dict[str, Any]], dict[str, Any]],
    ended: Callable[[sa.Connection], bool | None],
    newest: int | None = None,
) -> Iterator[bytes]:
    """``picked`` of the task's kept lines (of its ``newest`` lines only, if given), each
    ``{"result": render(line)}``; then with ``follow`` the lines that come after them, until
    ``ended(conn)`` has held for ``FOLLOW_GRACE_S`` with no new line (None: the owner is gone,
    and its lines with it: stop at once)."""
    with store.read() as conn:
        first, after = _first_lines(conn, task_id, picked, keep, newest, render)
    yield from first
    quiet_since: float | None = None
    while follow:
        time.sleep(FOLLOW_POLL_S)
        with store.read() as conn:
            rows = _logs.read(conn, task_id, after_id=after)
            over = ended(conn)
        if over is None:
            return
        for row in rows:
            if keep(row):
                yield (json.dumps({"result": render(row)}) + "\n").encode()
            after = row["id"]
        if rows or not over:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= FOLLOW_GRACE_S:
            return


def _first_lines(
    conn: sa.Connection,
    task_id: _logs.TaskIds,
    picked: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    keep: Callable[[dict[str, Any]], bool],
    newest: int | None,
    render: Callable[[dict[str, Any]], dict[str, Any]],
) -> tuple[list[bytes], int]:
    """The NDJSON lines (``{"result": render(line)}``) of ``picked`` of the task's kept lines
    (of its ``newest`` only, if given), and the id of the last line read."""
    rows = _logs.read(conn, task_id) if newest is None else _logs.newest(conn, task_id, newest)
    after = rows[-1]["id"] if rows else 0
    lines = [
        (json.dumps({"result": render(row)}) + "\n").encode()
        for row in picked([r for r in rows if keep(r)])
    ]
    return lines, after


def trial_log_body(
    conn: sa.Connection,
    trial_id: int,
    head: int,
    tail: int,
    limit: int,
    desc: bool,
    newest: int | None,
) -> bytes:
    """``GET /trials/{id}/logs``' body without filters or ``follow`` (a read function, see
    _read_workers: its answer is these NDJSON bytes); 404 for a trial that does not exist."""
    trial = _trials.require_trial(conn, trial_id)
    task_id = _trials.task_ids_of(conn, trial)  # every task of a continued trial

    def picked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _select(rows, head, tail, limit, desc)

    def render(row: dict[str, Any]) -> dict[str, Any]:
        return trial_log_json(row, trial_id)

    lines, _ = _first_lines(conn, task_id, picked, lambda _: True, newest, render)
    return b"".join(lines)


def trial_log_json(row: dict[str, Any], trial_id: int) -> dict[str, Any]:
    """``v1TrialLogsResponse``: the stored line plus the reference's formatted ``message``."""
    when = _time.rfc3339(_time.as_utc(row["timestamp"]))
    container = (row["container_id"] or "")[:8].ljust(8)
    rank = "" if row["rank_id"] is None else f"[rank={row['rank_id']}] "
    level = str(row["level"] or "LOG_LEVEL_INFO").removeprefix("LOG_LEVEL_")
    return {
        **_logs.log_json(row),
        "level": row["level"] or "LOG_LEVEL_UNSPECIFIED",  # as in task_log_response
        "trialId": trial_id,
        "message": f"[{when}] {container} {rank}|| {level}: {row['log']}",
    }


def _select(
    rows: list[dict[str, Any]], head: int, tail: int, limit: int, desc: bool
) -> list[dict[str, Any]]:
    """``head``/``tail`` keep the first/last N (oldest first); the reference's ``limit`` with
    ``orderBy=ORDER_BY_DESC`` gives the newest N, newest first."""
    if head:
        rows = rows[:head]
    elif tail:
        rows = rows[-tail:]
    if desc:
        rows = rows[::-1]
    return rows[:limit] if limit else rows


def _trial_lines(
    store: Store,
    trial_id: int,
    task_id: _logs.TaskIds,
    picked: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    follow: bool,
    keep: Callable[[dict[str, Any]], bool],
    newest: int | None = None,
) -> Iterator[bytes]:
    """``picked`` of the trial's kept lines (of its ``newest`` lines only, if given), then with
    ``follow`` the lines that come after them until the trial has ended (or is deleted)."""

    def ended(conn: sa.Connection) -> bool | None:
        trial = _trials.get_trial(conn, trial_id)
        return None if trial is None else State(trial["state"]).is_terminal

    return _log_lines(
        store,
        task_id,
        picked,
        follow,
        keep,
        render=lambda row: trial_log_json(row, trial_id),
        ended=ended,
        newest=newest,
    )


@router.get("/trials/{trial_id}/logs/fields")
def trial_log_fields(
    trial_id: int, caller: Caller, store: StoreDep, follow: bool = False
) -> StreamingResponse:
    """NDJSON ``{"result": v1TrialLogsFieldsResponse}`` (the task's fields but allocations),
    as ``task_log_fields``, until the trial is terminal and quiet."""
    caller.check_trial(trial_id)
    with store.read() as conn:
        trial = _trials.require_trial(conn, trial_id)
        task_ids = _trials.task_ids_of(conn, trial)  # every task of a continued trial

    def ended(conn: Any) -> bool:
        row = _trials.get_trial(conn, trial_id)
        return row is None or State(row["state"]).is_terminal

    keys = [k for k in _logs.FIELD_COLUMNS if k != "allocationIds"]
    lines = _field_lines(store, task_ids, follow, ended, keys)
    return StreamingResponse(lines, media_type="application/json")


@router.get("/trials/{trial_id}/logs")
async def trial_logs(
    trial_id: int,
    caller: Caller,
    store: StoreDep,
    reads: ReadsDep,
    follow: bool = False,
    head: int = Query(0, ge=0),
    tail: int = Query(0, ge=0),
    limit: Limit = 0,
    order_by: str = Query("ORDER_BY_ASC", alias="orderBy"),
    filters: LogFilter = Depends(),
) -> Response:
    """The trial's log lines as NDJSON ``{"result": v1TrialLog}``; ``head``/``tail`` keep the
    first/last N, ``limit`` + ``orderBy`` as in the reference (after the filters); ``follow``
    then streams new lines until the trial is terminal and quiet."""
    caller.check_trial(trial_id)
    desc = order_by in ("ORDER_BY_DESC", "desc")

    def picked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _select(rows, head, tail, limit, desc)

    # Unfiltered, the newest N lines are all a tail (or a newest-first page) can show: read
    # only those, not every line the trial ever logged.
    newest = None
    if filters.is_empty() and not head:
        newest = tail or (limit if desc else None) or None
    if not follow and filters.is_empty():
        # A read worker's (see _read_workers): the trial's tasks and the lines' JSON are no
        # work for this process.
        args = (trial_id, head, tail, limit, desc, newest)
        return Response(await reads.body(trial_log_body, *args), media_type="application/json")
    # Its database reads block: in the thread pool.
    return await run_in_threadpool(
        _trial_logs_here, store, trial_id, picked, follow, filters.keep(), newest
    )


def _trial_logs_here(
    store: Store,
    trial_id: int,
    picked: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    follow: bool,
    keep: Callable[[dict[str, Any]], bool],
    newest: int | None,
) -> Response:
    """``trial_logs``' answer read in this process: filtered, or followed."""
    with store.read() as conn:
        trial = _trials.require_trial(conn, trial_id)
        task_ids = _trials.task_ids_of(conn, trial)  # every task of a continued trial
    lines = _trial_lines(store, trial_id, task_ids, picked, follow, keep, newest)
    if not follow:  # one body, not a chunk (and a thread hop) per line
        return Response(b"".join(lines), media_type="application/json")
    return StreamingResponse(lines, media_type="application/json")
