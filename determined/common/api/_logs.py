"""Reading a trial's log lines from a master, for ``det trial logs`` and the SDK's
``Trial.iter_logs``.

0.37's master streams ``GET /api/v1/trials/{id}/logs`` as NDJSON (``{"result": v1TrialLog}``
per line; ``follow=true`` keeps it open until shortly after the trial ends). A master without
that route is read through ``GET /api/v1/tasks/{task_id}/logs`` pages (``searchAfter``),
polled while following.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from determined import errors
from determined.common.api import _routes
from determined.common.api._session import Session

TERMINAL_STATES = frozenset(
    {"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED", "STATE_DELETE_FAILED"}
)
POLL_SECONDS = 0.5


def _stream(
    sess: Session,
    trial_id: int,
    follow: bool,
    head: int | None,
    tail: int | None,
    filters: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    params: dict[str, Any] = {"follow": "true" if follow else "false", **filters}
    if head is not None or tail is not None:
        params["limit"] = head if head is not None else tail
    if tail is not None:
        params["orderBy"] = "ORDER_BY_DESC"
    resp = _routes.stream_trial_logs(sess, trial_id, params)
    lines: list[dict[str, Any]] = []
    sent = 0
    with resp:
        for raw in resp.iter_lines():
            if not raw:
                continue
            obj = json.loads(raw)
            if "error" in obj:
                raise errors.MasterError(f"log stream of trial {trial_id} failed: {obj['error']}")
            result = obj.get("result", obj)
            if tail is not None:
                lines.append(result)
            elif head is None or sent < head:  # trimmed here too: a master may send more
                sent += 1
                yield result
    if tail is not None:
        yield from _last(lines, tail)


def _last(lines: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The newest ``n`` entries, oldest first, whichever order the master sent them in."""
    try:
        ordered = sorted(lines, key=lambda e: int(e["id"]))
    except (KeyError, TypeError, ValueError):
        ordered = list(reversed(lines))  # the reference's tail order: newest first
    return ordered[-n:] if n else []


def _poll_task(
    sess: Session,
    trial_id: int,
    follow: bool,
    head: int | None,
    tail: int | None,
    filters: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    after = 0
    seen = 0
    buffer: list[dict[str, Any]] = []
    while True:
        trial = _routes.get_trial(sess, trial_id)
        done = trial.get("state") in TERMINAL_STATES
        page = _routes.get_task_logs(sess, trial["taskId"], {"searchAfter": after, **filters})
        for entry in page.get("logs") or []:
            after = max(after, int(entry.get("id") or 0))
            if head is not None and seen >= head:
                return
            seen += 1
            if tail is None:
                yield entry
            else:
                buffer = (buffer + [entry])[-tail:]
        if page.get("logs"):
            continue  # drain every page before looking at the state again
        if not follow or done:
            break
        time.sleep(POLL_SECONDS)
    yield from buffer


def trial_logs(
    sess: Session,
    trial_id: int,
    *,
    follow: bool = False,
    head: int | None = None,
    tail: int | None = None,
    filters: dict[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """Log entries of a trial, oldest first; with ``follow``, until the trial has ended.
    ``filters`` are the master's query parameters (``agentIds``, ``levels``, ``stdtypes``,
    ``timestampAfter``, ...: 0.37's ``TrialLogs`` filters).

    Raises:
        MasterNotFound: no such trial.
    """
    try:
        yield from _stream(sess, trial_id, follow, head, tail, filters or {})
        return
    except errors.MasterNotFound:
        # No streaming route on this master (or no such trial: the next call says which).
        _routes.get_trial(sess, trial_id)
    yield from _poll_task(sess, trial_id, follow, head, tail, filters or {})
