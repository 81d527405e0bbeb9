"""The cluster-wide message an admin sets (0.37's ``/api/v1/master/cluster_message``): GET the
current or upcoming one, PUT a new one (which ends the previous), DELETE to clear. The current
one also appears in ``GET /api/v1/master`` as ``clusterMessage``, where the web UI and
``det master info`` show it."""

from __future__ import annotations

import datetime
from typing import Any

from fastapi import APIRouter

from determined.master._errors import InvalidArgument, PermissionDenied
from determined.master._go_duration import parse_go_duration
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.api._models import _Body
from determined.master.store import _cluster_messages, _time

router = APIRouter(prefix="/api/v1/master")

MAX_LENGTH = 250  # characters, as 0.37


class SetClusterMessage(_Body):
    message: str = ""
    start_time: str | None = None
    end_time: str | None = None
    duration: str | None = None


def _require_admin(caller: Any) -> None:
    caller.require_user()
    if not caller.info.admin:
        raise PermissionDenied("only an admin may read, set or clear the cluster message")


def _time_field(value: str | None, name: str) -> datetime.datetime | None:
    try:
        return _time.parse(value)
    except ValueError as e:
        raise InvalidArgument(
            f"{name} {value!r} is not an RFC 3339 time (YYYY-MM-DDThh:mm:ssZ)"
        ) from e


@router.get("/cluster_message")
def get_cluster_message(caller: Caller, store: StoreDep) -> dict[str, Any]:
    _require_admin(caller)
    with store.read() as conn:
        row = _cluster_messages.current(conn, started=False)
    return {} if row is None else {"clusterMessage": _cluster_messages.message_json(row)}


@router.put("/cluster_message")
def set_cluster_message(body: SetClusterMessage, caller: Caller, store: StoreDep) -> dict[str, Any]:
    _require_admin(caller)
    if body.end_time is not None and body.duration is not None:
        raise InvalidArgument("EndTime and Duration are mutually exclusive")
    if len(body.message) > MAX_LENGTH:
        raise InvalidArgument(
            f"message must be at most {MAX_LENGTH} characters; got {len(body.message)}"
        )
    start = _time_field(body.start_time, "startTime") or _time.now()
    end = _time_field(body.end_time, "endTime")
    if body.duration is not None:
        try:
            end = start + parse_go_duration(body.duration)
        except ValueError as e:
            raise InvalidArgument(
                f"Duration must be a Go-formatted duration string with a positive value: {e}"
            ) from e
    if end is not None and end < start:
        raise InvalidArgument("end time must be after start time")
    if end is not None and end < _time.now():
        raise InvalidArgument("end time must be after current time")
    with store.tx() as conn:
        _cluster_messages.set_message(
            conn, message=body.message, start=start, end=end, user_id=caller.info.user_id
        )
    return {}


@router.delete("/cluster_message")
def clear_cluster_message(caller: Caller, store: StoreDep) -> dict[str, Any]:
    _require_admin(caller)
    with store.tx() as conn:
        _cluster_messages.clear(conn)
    return {}
