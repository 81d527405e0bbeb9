"""Delivering the outbox: a thread POSTs each due event to its URL, signed as 0.37 signs them
(``X-Determined-AI-Signature``: hex HMAC-SHA256 of ``"<timestamp>,<body>"`` with the master's
``webhooks.signing_key``), and retries a failure twice with backoff before giving up on it (as
0.37 does). An answer of 4xx is final. Events live in the database until then, so a restarted
master goes on delivering."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import logging
import threading
import time

import requests

from determined.master.store import Store, _time, _webhooks

logger = logging.getLogger("determined.master.webhooks")

BATCH = 10
ATTEMPTS = 3  # the first try and two retries
BACKOFF_S = (1.0, 2.0)  # before the second and the third try
TIMEOUT_S = 10.0
POLL_S = 1.0


def signature(key: str, timestamp: int, body: str) -> str:
    """The ``X-Determined-AI-Signature`` of a request body."""
    message = f"{timestamp},{body}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def post(url: str, body: str, signing_key: str) -> requests.Response:
    """One signed POST of ``body`` (JSON text)."""
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json; charset=UTF-8",
        "X-Determined-AI-Signature-Timestamp": str(timestamp),
        "X-Determined-AI-Signature": signature(signing_key, timestamp, body),
    }
    return requests.post(url, data=body.encode(), headers=headers, timeout=TIMEOUT_S)


class Shipper:
    """The delivery thread; :meth:`wake` after committing an event."""

    def __init__(self, store: Store, signing_key: str) -> None:
        self._store = store
        self._key = signing_key
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook-shipper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(TIMEOUT_S + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self._ship_due()
            except Exception:  # the store, most likely: try again shortly
                logger.exception("webhook delivery failed; retrying")
                delay = 5.0
            self._wake.wait(delay)
            self._wake.clear()

    def _ship_due(self) -> float:
        """Deliver what is due; the seconds until the next look (at most 1: events queued with
        log lines wake nobody, so the outbox is polled; an indexed read a second)."""
        while not self._stop.is_set():
            with self._store.read() as conn:
                events = _webhooks.due_events(conn, BATCH)
            if not events:
                break
            for event in events:
                self._deliver(event)
        with self._store.read() as conn:
            due = _webhooks.next_due(conn)
        if due is None:
            return POLL_S
        return max(0.05, min(POLL_S, (due - _time.now()).total_seconds()))

    def _deliver(self, event: dict[str, object]) -> None:
        event_id, url = int(event["id"]), str(event["url"])  # type: ignore[call-overload]
        attempts = int(event["attempts"]) + 1  # type: ignore[call-overload]
        try:
            answer = post(url, str(event["payload"]), self._key)
            final = answer.status_code < 500  # 2xx delivered; 4xx: the receiver said no
            if 400 <= answer.status_code < 500:
                logger.warning("webhook %s refused event %d: %s", url, event_id, answer.status_code)
            problem = f"HTTP {answer.status_code}"
        except requests.RequestException as e:
            final, problem = False, repr(e)
        with self._store.tx() as conn:
            if final or attempts >= ATTEMPTS:
                if not final:
                    logger.warning(
                        "giving up on webhook event %d to %s: %s", event_id, url, problem
                    )
                _webhooks.event_done(conn, event_id)
            else:
                later = _time.now() + datetime.timedelta(seconds=BACKOFF_S[attempts - 1])
                _webhooks.event_retry(conn, event_id, attempts, later)
