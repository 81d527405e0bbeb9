"""The token cache of determined/master/api/_auth.py (store/_token_cache.py): a cached token is
refused at once when it is revoked, its allocation exits or its experiment is deleted; it still
reaches only its own trial; a token's user deactivated behind the master's back is refused
within the cache's time limit; concurrent reports are stored exactly once."""

from __future__ import annotations

import pathlib
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess, Run, login

from determined.master._errors import Unauthenticated
from determined.master.api import _auth
from determined.master.store import (
    Store,
    _experiments,
    _metrics,
    _token_cache,
    _users,
    make_engine,
    sqlite_url,
)

pytestmark = pytest.mark.e2e


def _me(url: str, token: str) -> int:
    r = requests.get(url + "/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    return r.status_code


def _stored(master: MasterProcess, trial_id: int) -> list[int]:
    """The steps of the trial's live training rows, as the master committed them."""
    engine = make_engine(sqlite_url(master.data_dir))
    with engine.connect() as conn:
        rows = _metrics.list_rows(conn, trial_id, "training")
    engine.dispose()
    return sorted(int(r["steps_completed"]) for r in rows)


# ----------------------------------------------------------------------------- over HTTP


def test_a_cached_token_is_refused_right_after_logout(shared_master: MasterProcess) -> None:
    url = shared_master.url
    token = login(url, "determined")
    assert [_me(url, token) for _ in range(5)] == [200] * 5  # cached by now
    other = login(url, "determined")
    assert _me(url, other) == 200
    r = requests.post(url + "/api/v1/auth/logout", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    assert _me(url, token) == 401
    assert _me(url, other) == 200  # the user's other session lives on


def test_a_cached_allocation_token_is_refused_right_after_the_exit(
    shared_master: MasterProcess,
) -> None:
    run = Run(shared_master)
    for step in range(1, 6):
        assert run.metrics("training", step, {"loss": 1.0 / step}).status_code == 200
    old = run.trial
    assert run.exit(1) == "STATE_ACTIVE"  # failed: the trial restarts with a new allocation
    body = {
        "group": "training",
        "metrics": {
            "trialId": run.trial_id,
            "trialRunId": 1,
            "stepsCompleted": 6,
            "metrics": {"avgMetrics": {"loss": 0.1}},
        },
    }
    r = old.post(shared_master.url + f"/api/v1/trials/{run.trial_id}/metrics", json=body)
    assert r.status_code == 401, r.text
    assert _stored(shared_master, run.trial_id) == [1, 2, 3, 4, 5]
    run.allocate()
    assert run.metrics("training", 6, {"loss": 0.1}).status_code == 200


def test_a_cached_allocation_token_reaches_only_its_own_trial(
    shared_master: MasterProcess,
) -> None:
    mine, other = Run(shared_master), Run(shared_master)
    url = shared_master.url
    for step in (1, 2, 3):
        assert mine.metrics("training", step, {"loss": 1.0}).status_code == 200
    body = {
        "group": "training",
        "metrics": {
            "trialId": other.trial_id,
            "trialRunId": other.run_id,
            "stepsCompleted": 1,
            "metrics": {"avgMetrics": {"loss": 9.0}},
        },
    }
    for _ in range(3):
        r = mine.trial.post(url + f"/api/v1/trials/{other.trial_id}/metrics", json=body)
        assert r.status_code == 403 and str(mine.trial_id) in r.json()["message"]
        r = mine.trial.get(url + f"/api/v1/trials/{other.trial_id}")
        assert r.status_code == 403
        r = mine.trial.get(url + f"/api/v1/allocations/{other.allocation_id}/signals/preemption")
        assert r.status_code == 403
    assert _stored(shared_master, other.trial_id) == []
    assert _stored(shared_master, mine.trial_id) == [1, 2, 3]


def _race_an_exit(master: MasterProcess) -> None:
    run = Run(master)
    url = master.url + f"/api/v1/trials/{run.trial_id}/metrics"
    exited_at: list[float] = []
    results: list[tuple[float, int, int]] = []  # (sent at, step, status)
    lock = threading.Lock()
    steps = iter(range(1, 1_000_000))

    def hammer() -> None:
        s = master.session(run.token, allocation=True)
        while True:
            with lock:
                if exited_at and time.monotonic() > exited_at[0] + 0.5:
                    return
                step = next(steps)
            body = {
                "group": "training",
                "metrics": {
                    "trialId": run.trial_id,
                    "trialRunId": run.run_id,
                    "stepsCompleted": step,
                    "metrics": {"avgMetrics": {"loss": 1.0}},
                },
            }
            sent = time.monotonic()
            status = s.post(url, json=body).status_code
            with lock:
                results.append((sent, step, status))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    run.exit(0)
    with lock:
        exited_at.append(time.monotonic())
    for t in threads:
        t.join(30)
    late = [(sent, status) for sent, _, status in results if sent > exited_at[0]]
    assert late and all(status == 401 for _, status in late), late
    assert {status for _, _, status in results} <= {200, 401}
    accepted = sorted(step for _, step, status in results if status == 200)
    assert accepted and _stored(master, run.trial_id) == accepted


def test_no_post_sent_after_the_exit_returned_is_accepted(shared_master: MasterProcess) -> None:
    """Posts race the allocation's exit: the token is cached when the exit comes, and every
    post sent after the exit answered is refused; every accepted one is stored once."""
    for _ in range(3):
        _race_an_exit(shared_master)


def test_concurrent_reports_are_stored_exactly_once(shared_master: MasterProcess) -> None:
    runs = [Run(shared_master) for _ in range(4)]
    steps = 40

    def report(run: Run) -> list[int]:
        s = shared_master.session(run.token, allocation=True)
        url = shared_master.url + f"/api/v1/trials/{run.trial_id}/metrics"
        statuses = []
        for step in range(1, steps + 1):
            body = {
                "group": "training",
                "metrics": {
                    "trialId": run.trial_id,
                    "trialRunId": run.run_id,
                    "stepsCompleted": step,
                    "metrics": {"avgMetrics": {"loss": 1.0 / step}},
                },
            }
            statuses.append(s.post(url, json=body).status_code)
        return statuses

    # Two senders per trial: each report is posted twice at about the same time.
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(report, runs + runs))
    assert all(status == 200 for statuses in results for status in statuses)
    for run in runs:
        assert _stored(shared_master, run.trial_id) == list(range(1, steps + 1))
        trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
        assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == steps


def test_a_deactivated_users_token_is_refused(master: MasterProcess) -> None:
    """No endpoint deactivates users; done in the database behind the master's back, a token
    never seen is refused at once and a cached one within the cache's time limit."""
    url = master.url
    cached, fresh = login(url, "determined"), login(url, "determined")
    assert _me(url, cached) == 200
    db = sqlite3.connect(master.data_dir / "master.db")
    with db:
        db.execute("UPDATE users SET active = 0 WHERE username = 'determined'")
    db.close()
    assert _me(url, fresh) == 401
    deadline = time.monotonic() + _token_cache.TTL_S + 2.0
    while _me(url, cached) == 200:
        assert time.monotonic() < deadline, "a deactivated user's cached token still works"
        time.sleep(0.1)
    assert _me(url, cached) == 401
    r = requests.post(url + "/api/v1/auth/login", json={"username": "determined", "password": ""})
    assert r.status_code == 403 and r.json()["message"] == "user is not active"  # as 0.37


# ----------------------------------------------------------------------------- in process


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_cache_entries_expire_and_the_size_is_bounded() -> None:
    clock = _Clock()
    cache: _token_cache.TokenCache[str] = _token_cache.TokenCache(
        max_entries=3, ttl_s=2.0, clock=clock
    )
    for i in range(5):
        assert cache.put(f"d{i}", f"v{i}", generation=cache.generation(), allocation_id=None)
    assert len(cache) == 3
    assert [cache.get(f"d{i}") for i in range(5)] == [None, None, "v2", "v3", "v4"]
    clock.now += 2.0
    assert cache.get("d4") is None and len(cache) == 2


def test_allocation_tokens_live_longer_in_the_cache_than_users_tokens() -> None:
    clock = _Clock()
    cache: _token_cache.TokenCache[str] = _token_cache.TokenCache(
        ttl_s=2.0, allocation_ttl_s=20.0, clock=clock
    )
    assert cache.put("u", "user", generation=cache.generation(), allocation_id=None)
    assert cache.put("a", "alloc", generation=cache.generation(), allocation_id="t.1")
    clock.now += 2.0
    assert cache.get("u") is None and cache.get("a") == "alloc"
    clock.now += 17.9
    assert cache.get("a") == "alloc"
    clock.now += 0.1
    assert cache.get("a") is None and len(cache) == 0


def test_an_entry_in_use_is_handed_for_refresh_once_before_its_time_is_up() -> None:
    clock = _Clock()
    cache: _token_cache.TokenCache[str] = _token_cache.TokenCache(
        ttl_s=2.0, allocation_ttl_s=10.0, clock=clock
    )
    asked: list[tuple[str, str]] = []
    cache.refresh = lambda digest, value: asked.append((digest, value))
    for i in range(50):
        assert cache.put(f"a{i}", f"v{i}", generation=cache.generation(), allocation_id=f"t.{i}")
    clock.now += 10.0 * _token_cache.REFRESH_FROM - 0.01
    assert [cache.get(f"a{i}") for i in range(50)] == [f"v{i}" for i in range(50)]
    assert asked == []  # not due before REFRESH_FROM of the entry's time
    clock.now += 10.0 * (_token_cache.REFRESH_TO - _token_cache.REFRESH_FROM) / 2
    for i in range(50):
        cache.get(f"a{i}")
    halfway = len(asked)
    assert 0 < halfway < 50  # each entry's point is its own: they are not refreshed together
    clock.now = 100.0 + 10.0 * _token_cache.REFRESH_TO
    for _ in range(3):
        assert [cache.get(f"a{i}") for i in range(50)] == [f"v{i}" for i in range(50)]
    assert sorted(asked) == sorted((f"a{i}", f"v{i}") for i in range(50))  # each once
    # The refresh's read replaces the entry, with a time of its own; one not refreshed ends.
    assert cache.put("a0", "v0 again", generation=cache.generation(), allocation_id="t.0")
    clock.now = 100.0 + 10.0
    assert cache.get("a0") == "v0 again" and cache.get("a1") is None


def test_a_read_that_predates_a_forget_is_not_cached() -> None:
    cache: _token_cache.TokenCache[str] = _token_cache.TokenCache()
    before = cache.generation()
    assert cache.put("a", "alloc-token", generation=before, allocation_id="t.1")
    assert cache.put("u", "user-token", generation=before, allocation_id=None)
    cache.forget(_token_cache.Pending(allocation_ids={"t.1"}))
    assert cache.get("a") is None and cache.get("u") == "user-token"
    # A request that read "a" from the database before the forget must not cache it.
    assert not cache.put("a", "alloc-token", generation=before, allocation_id="t.1")
    assert cache.get("a") is None
    cache.forget(_token_cache.Pending())  # nothing to forget: nothing refused
    assert cache.put("b", "x", generation=cache.generation(), allocation_id=None)
    cache.forget(_token_cache.Pending(everything=True))
    assert len(cache) == 0


def _cache_token(store: Store, token: str, allocation_id: str | None = None) -> str:
    digest = _users.token_digest(token)
    generation = store.tokens.generation()
    assert store.tokens.put(digest, token, generation=generation, allocation_id=allocation_id)
    return digest


def test_store_transactions_drop_revoked_tokens_after_they_end(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    with store.tx() as conn:
        user_id = _users.user_id_by_name(conn, "determined")
        assert user_id is not None
        token = _users.issue_token(conn, user_id)
        other = _users.issue_token(conn, user_id)
    digest, kept = _cache_token(store, token), _cache_token(store, other)
    with store.tx() as conn:
        _users.revoke_token(conn, token)
        # Not yet committed: another request may still read the token as live.
        assert store.tokens.get(digest) == token
    assert store.tokens.get(digest) is None
    assert store.tokens.get(kept) == other
    # A revoke that rolls back drops the token too (it is read again on the next request).
    with pytest.raises(RuntimeError), store.tx() as conn:
        _users.revoke_token(conn, other)
        raise RuntimeError("rolled back")
    assert store.tokens.get(kept) is None
    with store.read() as conn:
        assert _users.token_digest(other) in _users.token_owners(conn, [kept])
    store.close()


def test_allocation_exits_and_experiment_deletions_drop_cached_tokens(
    tmp_path: pathlib.Path,
) -> None:
    store = Store(sqlite_url(tmp_path))
    with store.tx() as conn:
        user_id = _users.user_id_by_name(conn, "determined")
        assert user_id is not None
        tokens: dict[str, Any] = {
            name: _users.issue_token(conn, user_id, kind="allocation", allocation_id=name)
            for name in ("1.1", "2.1")
        }
    for name, token in tokens.items():
        _cache_token(store, token, name)
    with store.tx() as conn:
        _users.revoke_allocation_tokens(conn, "1.1")
    assert store.tokens.get(_users.token_digest(tokens["1.1"])) is None
    assert store.tokens.get(_users.token_digest(tokens["2.1"])) == tokens["2.1"]
    with store.tx() as conn:
        _experiments.delete_experiment(conn, 12345)  # none such: still drops every token
    assert len(store.tokens) == 0
    store.close()


@pytest.mark.parametrize("read", ["before the revoke", "between the revoke and its commit"])
def test_a_lookup_racing_a_revoke_is_not_cached(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """_auth._resolve reads the token as live, the revoke commits, then _resolve caches: the
    entry must be refused, whether the read came before the revoke or while it was uncommitted
    (the database still answered "live" both times)."""
    store = Store(sqlite_url(tmp_path))
    with store.tx() as conn:
        user_id = _users.user_id_by_name(conn, "determined")
        assert user_id is not None
        token = _users.issue_token(conn, user_id)
    digest = _users.token_digest(token)
    lookup, looked_up, go = _users.token_owners, threading.Event(), threading.Event()

    def slow_lookup(conn: Any, t: Any) -> Any:
        info = lookup(conn, t)
        looked_up.set()
        assert go.wait(10)
        return info

    monkeypatch.setattr(_users, "token_owners", slow_lookup)
    with ThreadPoolExecutor(1) as pool:
        if read == "before the revoke":
            racing = pool.submit(_auth._resolve, store, token, digest)
            assert looked_up.wait(10)
            with store.tx() as conn:
                _users.revoke_token(conn, token)
        else:
            with store.tx() as conn:
                _users.revoke_token(conn, token)
                racing = pool.submit(_auth._resolve, store, token, digest)
                assert looked_up.wait(10)
        go.set()
        assert racing.result(10).token == token  # served as before: it read a live token
    assert store.tokens.get(digest) is None
    monkeypatch.setattr(_users, "token_owners", lookup)
    with pytest.raises(Unauthenticated):
        _auth._resolve(store, token, digest)
    store.close()
