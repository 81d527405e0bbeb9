"""Who is calling: user login tokens and per-allocation tokens, and what each may reach.

Tokens arrive as ``Authorization: Bearer <token>`` (users; the reference's trials too) or
``Grpc-Metadata-x-allocation-token: Bearer <token>`` (an allocation's token). An allocation's
token reaches only its own allocation, its trial, its task and its experiment's searcher state;
anything else answers 403.

A token's principal is cached by token digest (``Store.tokens``, see ``store/_token_cache``):
a trial's process sends its token several times a second. Revoking or deleting tokens drops
them from the cache as the transaction ends, so a revoked token is refused at once. A cached
principal holds only what cannot change while its token lives, or drops out of the cache
when it does: the user (``_users.update_user`` forgets its tokens) and the ids that place an
allocation's token (its allocation, task, trial, experiment).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import types
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from determined.master._errors import PermissionDenied, Unauthenticated
from determined.master._read_workers import ReadWorkers
from determined.master.api._services import services
from determined.master.store import Store, _experiments, _token_cache, _trials, _users

logger = logging.getLogger("determined.master")

TOKEN_HEADERS = ("authorization", "grpc-metadata-x-allocation-token", "x-allocation-token")
HEADER_NAMES = frozenset(h.encode() for h in TOKEN_HEADERS)  # as raw ASGI headers name them


@dataclasses.dataclass(frozen=True)
class Principal:
    """The caller of one request."""

    token: str
    info: _users.TokenInfo
    # For allocation tokens: the fields of its allocation and trial rows that never change
    # (_users.ALLOCATION_KEYS, _users.TRIAL_KEYS), read-only: the token cache shares them.
    allocation: Mapping[str, Any] | None = None
    trial: Mapping[str, Any] | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickled as plain dicts (a read worker reads principals for the master's token cache:
        # TokenResolver); a mapping proxy itself does not pickle.
        return _principal, (self.token, self.info, _plain(self.allocation), _plain(self.trial))

    @property
    def is_allocation(self) -> bool:
        return self.info.kind == "allocation"

    def check_trial(self, trial_id: int) -> None:
        if self.trial is not None and int(self.trial["id"]) != trial_id:
            raise PermissionDenied(
                f"this allocation's token belongs to trial {self.trial['id']}, not {trial_id}"
            )

    def check_allocation(self, allocation_id: str) -> None:
        if self.allocation is not None and self.allocation["id"] != allocation_id:
            raise PermissionDenied(
                f"this token belongs to allocation {self.allocation['id']}, not {allocation_id}"
            )

    def check_task(self, task_id: str) -> None:
        if self.allocation is not None and self.allocation["task_id"] != task_id:
            raise PermissionDenied(
                f"this token belongs to task {self.allocation['task_id']}, not {task_id}"
            )

    def check_experiment(self, experiment_id: int) -> None:
        if self.trial is not None and int(self.trial["experiment_id"]) != experiment_id:
            raise PermissionDenied(
                f"this allocation's token belongs to experiment {self.trial['experiment_id']}, "
                f"not {experiment_id}"
            )

    def require_user(self) -> None:
        if self.is_allocation:
            raise PermissionDenied("this endpoint needs a user's login token")

    def require_admin(self, action: str) -> None:
        """403 unless a user's token of an admin."""
        self.require_user()
        if not self.info.admin:
            raise PermissionDenied(f"only an admin may {action}; log in as one (det user login)")

    def owns(self, owner_id: Any) -> bool:
        """Whether a user's token is the owner's (``owner_id``) or an admin's: who may change a
        task or template, and so sees its config whole (``_redact``)."""
        if self.is_allocation:
            return False
        return self.info.admin or (owner_id is not None and int(owner_id) == self.info.user_id)

    def check_owner(self, store: Store, experiment_id: int, action: str) -> None:
        """403 unless the caller is a user who owns the experiment, or an admin. 404 when there
        is no such experiment."""
        self.require_user()
        if self.info.admin:
            return
        with store.read() as conn:
            owner = _experiments.owner_of(conn, experiment_id)
        if owner != self.info.user_id:
            raise PermissionDenied(
                f"experiment {experiment_id} is not yours: only its owner or an admin may "
                f"{action} it"
            )

    def check_trial_owner(self, store: Store, trial_id: int, action: str) -> None:
        """check_owner for the trial's experiment (404 when there is no such trial)."""
        self.require_user()
        with store.read() as conn:
            experiment_id = int(_trials.require_trial(conn, trial_id)["experiment_id"])
        self.check_owner(store, experiment_id, f"{action} trial {trial_id} of")

    def check_reporter(self, store: Store, trial_id: int) -> None:
        """Who may report a trial's metrics, checkpoints and progress: its own allocation's
        token, or (unmanaged use, the reference's trials) its experiment's owner's login token.
        Another user's token is 403, an admin's too: nobody forges another's results."""
        if self.is_allocation:
            self.check_trial(trial_id)
            return
        with store.read() as conn:
            experiment_id = int(_trials.require_trial(conn, trial_id)["experiment_id"])
            owner = _experiments.owner_of(conn, experiment_id)
        if owner != self.info.user_id:
            raise PermissionDenied(
                f"trial {trial_id} belongs to experiment {experiment_id} of another user: only "
                "that trial's allocation token or its owner may report for it"
            )


def bearer_token(header: Callable[[str], str | None]) -> str | None:
    """The first ``Bearer`` token of the token headers (``header(name)`` reads one)."""
    for name in TOKEN_HEADERS:
        value = header(name)
        token = bearer_of(value) if value else None
        if token:
            return token
    return None


def bearer_of(value: str) -> str | None:
    """The token of one token header's ``value`` (``Bearer <token>``), or None."""
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def _bearer(request: HTTPConnection) -> str | None:
    return bearer_token(request.headers.get) or request.cookies.get("auth") or None


def _plain(fields: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if fields is None else dict(fields)


def _principal(
    token: str,
    info: _users.TokenInfo,
    allocation: dict[str, Any] | None,
    trial: dict[str, Any] | None,
) -> Principal:
    """A principal whose allocation and trial fields are read-only (it is shared through the
    token cache); also how a pickled one is made again."""
    return Principal(
        token=token,
        info=info,
        allocation=None if allocation is None else types.MappingProxyType(allocation),
        trial=None if trial is None else types.MappingProxyType(trial),
    )


def _resolve(store: Store, token: str, digest: str) -> Principal:
    """The caller from the database (then cached), or 401. Blocks: run it off the event loop."""
    generation = store.tokens.generation()  # before reading: see TokenCache.put
    with store.read() as conn:
        principal = _principal_in(conn, token)
    _cache(store, digest, principal, generation)
    return principal


def _principal_in(conn: sa.Connection, token: str) -> Principal:
    """The principal of ``token`` as the database has it, or 401."""
    digest = _users.token_digest(token)
    return _principal_of_owner(token, _users.token_owners(conn, [digest]).get(digest))


def _principal_of_owner(token: str, owner: _users.TokenOwner | None) -> Principal:
    """The principal of ``token`` whose owner the database gave (None: none), or 401."""
    if owner is None:
        raise Unauthenticated("invalid or expired token; log in again")
    info = owner.info
    gone = owner.allocation is None or owner.trial is None
    if info.kind == "allocation" and info.allocation_id is not None and gone:
        raise Unauthenticated(f"allocation {info.allocation_id} of this token no longer exists")
    return _principal(token, info, owner.allocation, owner.trial)


def _cache(store: Store, digest: str, principal: Principal, generation: int) -> None:
    allocation_id = principal.info.allocation_id
    store.tokens.put(digest, principal, generation=generation, allocation_id=allocation_id)


# Told once a token has been read into the cache, on the event loop that asked.
Resolved = Callable[[], None]
# The longest TokenResolver waits for a read worker's answer: past it, whoever waits takes the
# slow way (the request reads its token itself) rather than every later token waiting too.
READ_TIMEOUT_S = 30.0


class TokenResolver:
    """Reads tokens into the master's token cache from a thread of its own, every token asked
    for meanwhile in one read transaction: the cache's background refreshes
    (``TokenCache.refresh``) and the hot lane's tokens not yet cached (``api._hot.HotLane``:
    800 trials reporting to a master that just started would otherwise each take the slow way,
    one database read and a thread-pool hop apiece, all in the same second).

    The read itself runs in a read worker (``reads``; without them, or with none given, in
    this process) where the master has them: in the
    master's process, the refreshes of 800 trials' tokens held its GIL for a few milliseconds a
    batch, and every report waited meanwhile (report p99 30 -> 150 ms in the 5-second windows
    of ``benchmarks/master_metrics.py`` where they fell).

    A token that is no longer valid is dropped from the cache; its requests then take the slow
    way, which answers 401 with the reason.
    """

    def __init__(self, store: Store, reads: ReadWorkers | None = None) -> None:
        self.store = store
        self.reads = reads if reads is not None else ReadWorkers(store, 0)
        self._cond = threading.Condition()
        # digest -> (token, who waits: (their loop, callback) pairs)
        self._asked: dict[str, tuple[str, list[tuple[asyncio.AbstractEventLoop, Resolved]]]] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def refresh(self, digest: str, principal: Principal) -> None:
        """``TokenCache.refresh``: read ``principal``'s token again, nobody waiting."""
        self._ask(principal.token, digest, None)

    def resolve_soon(self, token: str, digest: str, done: Resolved) -> None:
        """Read ``token`` (digest ``digest``) into the cache, then call ``done()`` on the
        running event loop (the cache has its principal then, or nothing if it is not valid or
        could not be read)."""
        self._ask(token, digest, (asyncio.get_running_loop(), done))

    def close(self) -> None:
        """Stop the thread once what was asked for is read."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(10)

    def _ask(
        self, token: str, digest: str, waiter: tuple[asyncio.AbstractEventLoop, Resolved] | None
    ) -> None:
        with self._cond:
            if self._closed:
                if waiter is not None:
                    waiter[0].call_soon(waiter[1])  # no cache entry: the slow way
                return
            _, waiters = self._asked.setdefault(digest, (token, []))
            if waiter is not None:
                waiters.append(waiter)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._read_forever, name="token-resolver", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _read_forever(self) -> None:
        while True:
            with self._cond:
                while not self._asked and not self._closed:
                    self._cond.wait()
                if not self._asked:
                    return
                asked, self._asked = self._asked, {}
            try:
                self._read(asked)
            except Exception:  # noqa: BLE001 - the waiters take the slow way, which reports it
                logger.exception("could not read tokens into the cache")
            by_loop: dict[asyncio.AbstractEventLoop, list[Resolved]] = {}
            for _, waiters in asked.values():
                for loop, done in waiters:
                    by_loop.setdefault(loop, []).append(done)
            for loop, callbacks in by_loop.items():
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(_call_each, callbacks)

    def _read(self, asked: dict[str, tuple[str, Any]]) -> None:
        generation = self.store.tokens.generation()  # before reading: see TokenCache.put
        tokens = {digest: token for digest, (token, _) in asked.items()}
        found: dict[str, Principal | None] = self.reads.call_blocking(
            principals_of, tokens, timeout=READ_TIMEOUT_S
        )
        for digest, principal in found.items():
            if principal is None:
                self.store.tokens.forget(_token_cache.Pending(digests={digest}))
            else:
                _cache(self.store, digest, principal, generation)


def principals_of(conn: sa.Connection, tokens: dict[str, str]) -> dict[str, Principal | None]:
    """The principal of each of ``tokens`` (by digest), None for one that is not valid (a read
    function: see ``_read_workers``)."""
    owners = _users.token_owners(conn, tokens)
    found: dict[str, Principal | None] = {}
    for digest, token in tokens.items():
        try:
            found[digest] = _principal_of_owner(token, owners.get(digest))
        except Unauthenticated:
            found[digest] = None
    return found


def _call_each(callbacks: list[Resolved]) -> None:
    for done in callbacks:
        try:
            done()
        except Exception:  # noqa: BLE001 - one waiter's failure must not strand the others
            logger.exception("a token's waiter failed")


async def authenticate(request: Request) -> Principal:
    """FastAPI dependency: the caller, or 401. On the event loop when the token is cached (no
    thread hop, no database read); otherwise the database is read in the thread pool."""
    return await authenticate_connection(request)


def check_origin(request: HTTPConnection) -> None:
    """403 for a websocket authenticated by the ``auth`` cookie alone whose ``Origin`` is not
    this master: a browser sends the cookie with a websocket that any site opens (cross-site
    websocket hijacking), and websockets have no CSRF header to check. Clients that send a
    bearer token (det, the SDK, the web UI) are not affected."""
    if request.scope.get("type") != "websocket" or bearer_token(request.headers.get):
        return
    origin = request.headers.get("origin")
    if not origin or not request.cookies.get("auth"):
        return
    parsed = urllib.parse.urlsplit(origin)
    host = (request.headers.get("host") or "").lower()
    if parsed.netloc.lower() != host:
        raise PermissionDenied(
            f"a websocket from {origin!r} may not use this master's login cookie; "
            "connect from the master's own pages or send 'Authorization: Bearer <token>'"
        )


async def authenticate_connection(request: HTTPConnection) -> Principal:
    """:func:`authenticate` for any connection, a websocket's too (see :func:`check_origin`)."""
    token = _bearer(request)
    if token is None:
        raise Unauthenticated(
            "no token: log in (POST /api/v1/auth/login) and send 'Authorization: Bearer <token>'"
        )
    check_origin(request)
    return await principal_of(services(request).store, token)


async def principal_of(store: Store, token: str) -> Principal:
    """The principal of ``token`` (cached, else read in the thread pool), or 401."""
    digest = _users.token_digest(token)
    cached: Principal | None = store.tokens.get(digest)
    if cached is not None:
        return cached
    return await run_in_threadpool(_resolve, store, token, digest)


async def check_reporter(caller: Principal, store: Store, trial_id: int) -> None:
    """``Principal.check_reporter`` from the event loop: no thread hop for allocation tokens."""
    if caller.is_allocation:
        caller.check_trial(trial_id)
    else:
        await run_in_threadpool(caller.check_reporter, store, trial_id)


Caller = Annotated[Principal, Depends(authenticate)]
