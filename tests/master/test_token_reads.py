"""Tokens read in batches (``_users.token_owners``) and in the read workers (``TokenResolver``
with ``ReadWorkers``): the same principals, and the same refusals, as a token read alone."""

from __future__ import annotations

import asyncio
import pathlib
import pickle
import time
import types
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from determined.master._errors import Unauthenticated
from determined.master._read_workers import ReadWorkers
from determined.master.api import _auth
from determined.master.store import Store, _experiments, _trials, _users, sqlite_url
from determined.master.store._enums import State
from determined.master.store._schema import allocations


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    s = Store(sqlite_url(tmp_path))
    yield s
    s.close()


def _tokens(store: Store) -> dict[str, str]:
    """Tokens of every kind the database can hold, by what each is."""
    with store.tx() as conn:
        exp = _experiments.insert_experiment(
            conn, config={}, original_config="", model_definition=None, owner_id=1
        )
        trial = _trials.insert_trial(
            conn, experiment_id=exp, request_id="r", hparams={}, seed=0, state=State.ACTIVE
        )
        live = _trials.insert_allocation(conn, trial, [])["id"]
        gone = _trials.insert_allocation(conn, trial, [])["id"]
        determined = _users.user_id_by_name(conn, "determined")
        assert determined is not None
        inactive = _users.create_user(conn, "leaver", "")
        tokens = {
            "admin": _users.issue_token(conn, 1),
            "user": _users.issue_token(conn, determined),
            "allocation": _users.issue_token(conn, 1, kind="allocation", allocation_id=live),
            "allocation gone": _users.issue_token(conn, 1, kind="allocation", allocation_id=gone),
            "revoked": _users.issue_token(conn, determined),
            "inactive user": _users.issue_token(conn, inactive),
        }
        _users.revoke_token(conn, tokens["revoked"])
        _users.update_user(conn, inactive, active=False)
        conn.execute(sa.delete(allocations).where(allocations.c.id == gone))
    tokens["unknown"] = "not-a-token"
    return tokens


def _alone(store: Store, token: str) -> _auth.Principal | str:
    """The principal of ``token`` read alone, or the 401's message."""
    with store.read() as conn:
        try:
            return _auth._principal_in(conn, token)
        except Unauthenticated as e:
            return str(e)


def test_a_batch_of_tokens_reads_as_each_token_alone(store: Store) -> None:
    tokens = _tokens(store)
    alone = {kind: _alone(store, token) for kind, token in tokens.items()}
    assert {kind for kind, p in alone.items() if isinstance(p, _auth.Principal)} == {
        "admin",
        "user",
        "allocation",
    }
    assert alone["allocation gone"] == (
        f"allocation {_owner_allocation(store, tokens['allocation gone'])} of this token no "
        "longer exists"
    )
    assert alone["revoked"] == alone["unknown"] == alone["inactive user"]
    by_digest = {_users.token_digest(t): t for t in tokens.values()}
    with store.read() as conn:
        batch = _auth.principals_of(conn, by_digest)
    for kind, token in tokens.items():
        read = batch[_users.token_digest(token)]
        assert read == (alone[kind] if isinstance(alone[kind], _auth.Principal) else None), kind
    principal = alone["allocation"]
    assert isinstance(principal, _auth.Principal)
    assert principal.trial is not None and principal.allocation is not None
    assert set(principal.trial) == set(_users.TRIAL_KEYS)
    assert set(principal.allocation) == set(_users.ALLOCATION_KEYS)
    assert isinstance(principal.trial, types.MappingProxyType)  # shared: read-only


def _owner_allocation(store: Store, token: str) -> str:
    digest = _users.token_digest(token)
    with store.read() as conn:
        owner = _users.token_owners(conn, [digest]).get(digest)
    assert owner is not None and owner.info.allocation_id is not None
    return owner.info.allocation_id


def test_more_tokens_than_one_query_binds_are_read(store: Store) -> None:
    with store.tx() as conn:
        tokens = [_users.issue_token(conn, 1) for _ in range(1203)]
    digests = [_users.token_digest(t) for t in tokens]
    with store.read() as conn:
        owners = _users.token_owners(conn, [*digests, *digests[:5], "no-such-digest"])
    assert set(owners) == set(digests)
    assert {o.info.user_id for o in owners.values()} == {1}


def test_a_principal_pickles_with_its_fields_read_only(store: Store) -> None:
    principal = _alone(store, _tokens(store)["allocation"])
    assert isinstance(principal, _auth.Principal)
    again = pickle.loads(pickle.dumps(principal))
    assert again == principal
    assert isinstance(again.allocation, types.MappingProxyType)
    assert isinstance(again.trial, types.MappingProxyType)
    with pytest.raises(TypeError):
        again.trial["id"] = 5  # type: ignore[index]


@pytest.mark.parametrize("processes", [1, 0])
def test_the_resolver_reads_tokens_in_the_read_workers(
    store: Store, processes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = _tokens(store)
    expected = {kind: _alone(store, token) for kind, token in tokens.items()}
    reads = ReadWorkers(store, processes)
    if processes:  # the master's process reads nothing itself then
        monkeypatch.setattr(store, "read", _no_read)
    resolver = _auth.TokenResolver(store, reads)
    try:

        async def resolve_all() -> None:
            done = [asyncio.Event() for _ in tokens]
            for (_, token), event in zip(tokens.items(), done, strict=True):
                resolver.resolve_soon(token, _users.token_digest(token), event.set)
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in done)), 60)

        asyncio.run(resolve_all())
        for kind, token in tokens.items():
            cached = store.tokens.get(_users.token_digest(token))
            alone = expected[kind]
            assert cached == (alone if isinstance(alone, _auth.Principal) else None), kind
    finally:
        resolver.close()
        reads.close()


def _no_read() -> None:
    raise AssertionError("the master's process read the database itself")


def test_a_read_worker_that_does_not_answer_sends_the_waiters_the_slow_way(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = _tokens(store)["allocation"]
    monkeypatch.setattr(_auth, "READ_TIMEOUT_S", 0.5)
    reads = ReadWorkers(store, 1)
    resolver = _auth.TokenResolver(store, reads)
    pool = reads._get_pool()
    assert pool is not None
    busy = pool.submit(time.sleep, 4)  # the only worker: busy past the resolver's patience
    try:

        async def resolve() -> float:
            done = asyncio.Event()
            start = time.monotonic()
            resolver.resolve_soon(token, _users.token_digest(token), done.set)
            await asyncio.wait_for(done.wait(), 10)
            return time.monotonic() - start

        waited = asyncio.run(resolve())
        assert 0.4 < waited < 3.5, waited
        assert store.tokens.get(_users.token_digest(token)) is None  # nothing read: slow way
        busy.result(10)
        asyncio.run(resolve())  # the worker answers again
        assert store.tokens.get(_users.token_digest(token)) == _alone(store, token)
    finally:
        resolver.close()
        reads.close()
