"""0.37's streaming updates: the ``/stream`` websocket that ``determined.common.streams.Stream``
reads. A client sends ``{sync_id, known, subscribe}``; the master answers
``{sync_id, complete: false}``, an upsert per matching row it does not know at that version
(``{"project": {..., "seq": N}}``), a deletion of the known ids that no longer match
(``{"projects_deleted": "1-3,7"}``), ``{sync_id, complete: true}``; then live upserts and
deletions as rows change, until the next subscription replaces it.

Kinds: ``projects``, ``models`` and ``modelversions`` (what 0.37's client subscribes to), and
``experiments``, ``trials`` and ``metrics``. A change is noticed when the experiment machinery
commits an event (``_signals.STREAM_KEY``: every kind subscribed to is read again) or a trial
reports metrics (``STREAM_METRICS_KEY``: only trials and metrics are, the kinds a report
changes; under thousands of reports a second a subscription to every experiment of a project
would otherwise read them all again for each), and otherwise within :data:`POLL_S` (projects
and the registry change through plain routes).

The rows a subscription covers are read and written out as their messages' JSON text by the
read workers (``store._stream.read``, see ``_read_workers``): the master only stamps them and
sends them.

``seq``: a per-master counter stamped on a row each time its message changes, started from the
clock so that it keeps rising across master restarts; a client's ``since`` skips the known
rows stamped at or before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from determined.master._errors import ApiError
from determined.master._read_workers import ReadWorkers
from determined.master._signals import STREAM_KEY, STREAM_METRICS_KEY, Signals
from determined.master.api._auth import authenticate_connection
from determined.master.api._services import services
from determined.master.store import _stream

router = APIRouter()

POLL_S = 1.0
# What a metric report changes (STREAM_METRICS_KEY).
_METRIC_KINDS = frozenset({"trials", "metrics"})
# The upsert message key and the deletion key of each kind.
_UPSERT = {
    "projects": "project",
    "models": "model",
    "modelversions": "modelversion",
    "experiments": "experiment",
    "trials": "trial",
    "metrics": "metric",
}


def range_encode(ids: set[int]) -> str:
    """``{1, 2, 3, 7}`` -> ``"1-3,7"`` (the client's ``KeyCache.known`` form)."""
    out: list[str] = []
    for i in sorted(ids):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def range_decode(text: str) -> set[int]:
    """``"1-3,7"`` -> ``{1, 2, 3, 7}``; raises ValueError on anything else."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        start, _, end = part.partition("-")
        out.update(range(int(start), int(end or start) + 1))
    return out


class Stamps:
    """The ``seq`` of each row of each kind, shared by every connection of the master."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = int(time.time() * 1_000_000)  # µs: above any seq of an earlier run
        # (kind, id) -> (the message's text, its seq)
        self._seen: dict[tuple[str, int], tuple[str, int]] = {}

    def stamp(self, kind: str, rows: dict[int, str]) -> dict[int, int]:
        """``{id: seq}`` of rows given as their messages' text: a new seq for each row whose
        text differs from the last one."""
        out: dict[int, int] = {}
        with self._lock:
            for row_id, text in rows.items():
                seen = self._seen.get((kind, row_id))
                if seen is None or seen[0] != text:
                    self._next += 1
                    seen = self._seen[(kind, row_id)] = (text, self._next)
                out[row_id] = seen[1]
        return out


class BadSubscription(ValueError):
    """A startup message the master cannot read; the connection closes with its text."""


def parse_startup(msg: Any) -> tuple[Any, dict[str, set[int]], dict[str, dict[str, Any]]]:
    """``(sync_id, known ids by kind, subscription specs by kind)`` of a client message."""
    if not isinstance(msg, dict) or "subscribe" not in msg:
        raise BadSubscription("a stream message is {sync_id, known, subscribe}")
    subscribe = msg.get("subscribe") or {}
    known_raw = msg.get("known") or {}
    if not isinstance(subscribe, dict) or not isinstance(known_raw, dict):
        raise BadSubscription("subscribe and known must be objects keyed by kind")
    specs: dict[str, dict[str, Any]] = {}
    for kind, spec in subscribe.items():
        fields = _stream.SPEC_FIELDS.get(kind)
        if fields is None:
            raise BadSubscription(
                f"cannot subscribe to {kind!r}; kinds: {', '.join(_stream.SPEC_FIELDS)}"
            )
        if not isinstance(spec, dict) or set(spec) - {*fields, "since"}:
            raise BadSubscription(f"{kind}: a spec takes {', '.join(fields)} and since")
        ids = {f: spec.get(f) for f in fields}
        for f, v in ids.items():
            if v is not None and not (isinstance(v, list) and all(isinstance(i, int) for i in v)):
                raise BadSubscription(f"{kind}.{f} must be a list of integer ids")
        since = spec.get("since") or 0
        if not isinstance(since, int):
            raise BadSubscription(f"{kind}.since must be an integer")
        specs[kind] = {"ids": ids, "since": since}
    known: dict[str, set[int]] = {}
    for kind, text in known_raw.items():
        if kind not in _stream.SPEC_FIELDS or not isinstance(text, str):
            raise BadSubscription(f"known.{kind}: a range-encoded string of known ids")
        try:
            known[kind] = range_decode(text)
        except ValueError as e:
            raise BadSubscription(f"known.{kind}: {text!r} is not like '1-3,7'") from e
    return msg.get("sync_id"), known, specs


class _Subscription:
    """One connection's live subscription: what it has sent of each kind, by id and seq."""

    def __init__(self, specs: dict[str, dict[str, Any]]) -> None:
        self.specs = specs
        self.sent: dict[str, dict[int, int]] = {kind: {} for kind in specs}

    def updates(self, current: dict[str, tuple[dict[int, str], dict[int, int]]]) -> list[str]:
        """The messages (JSON text) that bring the client from what it was sent to
        ``current``."""
        out: list[str] = []
        for kind, (rows, seqs) in current.items():
            sent = self.sent[kind]
            gone = set(sent) - set(rows)
            if gone:
                out.append(json.dumps({f"{kind}_deleted": range_encode(gone)}))
                for i in gone:
                    del sent[i]
            for row_id in sorted(rows):
                if sent.get(row_id) != seqs[row_id]:
                    out.append(_upsert(kind, rows[row_id], seqs[row_id]))
                    sent[row_id] = seqs[row_id]
        return out


def _upsert(kind: str, text: str, seq: int) -> str:
    """``json.dumps({"experiment": {**body, "seq": seq}})``, written around the body's text."""
    return f'{{"{_UPSERT[kind]}": {text[:-1]}, "seq": {seq}}}}}'


async def _read(
    reads: ReadWorkers, stamps: Stamps, specs: dict[str, dict[str, Any]]
) -> dict[str, tuple[dict[int, str], dict[int, int]]]:
    rows = await reads.call(_stream.read, {kind: spec["ids"] for kind, spec in specs.items()})
    return {kind: (r, stamps.stamp(kind, r)) for kind, r in rows.items()}


def _start(
    sub: _Subscription,
    known: dict[str, set[int]],
    current: dict[str, tuple[dict[int, str], dict[int, int]]],
) -> list[str]:
    """The first messages (JSON text) of a subscription: known rows still at the client's
    version count as sent; known kinds no longer subscribed to are deleted whole."""
    out: list[str] = []
    for kind, ids in known.items():
        if kind not in sub.specs and ids:
            out.append(json.dumps({f"{kind}_deleted": range_encode(ids)}))
    for kind, (_, seqs) in current.items():
        since = sub.specs[kind]["since"]
        for row_id in known.get(kind, set()):
            # Known and unchanged since the client's newest seq: no upsert; known and gone:
            # a deletion (updates() finds it in sent and not in rows).
            sub.sent[kind][row_id] = seqs[row_id] if seqs.get(row_id, since + 1) <= since else -1
    return out + sub.updates(current)


async def _wake_or_message(
    ws: WebSocket, signals: Signals, receiving: asyncio.Task[Any] | None
) -> tuple[asyncio.Task[Any], bool]:
    """Wait for a change signal, the poll interval or a client message; return the pending
    receive task (done when a message arrived), and whether only metric reports woke it."""
    if receiving is None:
        receiving = asyncio.ensure_future(ws.receive_text())
    event, reported = signals.watch(STREAM_KEY), signals.watch(STREAM_METRICS_KEY)
    waiting = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(reported.wait())}
    try:
        await asyncio.wait({receiving, *waiting}, timeout=POLL_S, return_when="FIRST_COMPLETED")
    finally:
        for w in waiting:
            w.cancel()
        signals.unwatch(STREAM_KEY, event)
        signals.unwatch(STREAM_METRICS_KEY, reported)
    return receiving, reported.is_set() and not event.is_set() and not receiving.done()


@router.websocket("/stream")
async def stream(ws: WebSocket) -> None:
    """0.37's streaming updates (see the module docstring); users' tokens only."""
    try:
        caller = await authenticate_connection(ws)
        caller.require_user()
    except ApiError as e:
        # Refused before the handshake: the client sees the HTTP status (lomond: Rejected).
        await ws.close(code=1008, reason=str(e)[:120])
        return
    await ws.accept()
    reads: ReadWorkers = services(ws).reads
    signals: Signals = services(ws).signals
    stamps: Stamps = services(ws).stream_stamps
    sub: _Subscription | None = None
    only_reports = False  # the last wake-up was for metric reports alone
    receiving: asyncio.Task[Any] | None = None
    try:
        while True:
            if receiving is not None and receiving.done():
                text = receiving.result()
                receiving = None
                try:
                    sync_id, known, specs = parse_startup(json.loads(text))
                except (ValueError, BadSubscription) as e:
                    await ws.close(code=1003, reason=str(e)[:120])
                    return
                sub = _Subscription(specs)
                await ws.send_text(json.dumps({"sync_id": sync_id, "complete": False}))
                current = await _read(reads, stamps, specs)
                for text in _start(sub, known, current):
                    await ws.send_text(text)
                await ws.send_text(json.dumps({"sync_id": sync_id, "complete": True}))
            elif sub is not None:
                specs = sub.specs
                if only_reports:
                    specs = {k: v for k, v in specs.items() if k in _METRIC_KINDS}
                if specs:
                    current = await _read(reads, stamps, specs)
                    for text in sub.updates(current):
                        await ws.send_text(text)
            receiving, only_reports = await _wake_or_message(ws, signals, receiving)
            if signals.stopping:
                # Going away: 0.37's client reconnects (to the restarted master) by itself.
                await ws.close(code=1001, reason="the master is stopping")
                return
    except WebSocketDisconnect:
        return
    finally:
        if receiving is not None:
            receiving.cancel()
            with contextlib.suppress(BaseException):
                await receiving
