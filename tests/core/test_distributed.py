"""DistributedContext with real processes and real ZMQ sockets
(docs/reference/harness.md §3, §19 items 6-13).

Several "nodes" are simulated on this machine: ranks with the same cross_rank share a node-local
channel, and every test uses its own free ports.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _kit import dist_worker as w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from determined import errors
from determined.core._distributed import DistributedContext, default_ports


def _ok(results: list[Any]) -> list[Any]:
    failed = [r for r in results if isinstance(r, w.Failed)]
    assert not failed, failed
    return results


# §19 item 6, 8: construction rules that open no sockets.


def test_multi_node_without_chief_ip_raises_assertion_error() -> None:
    with pytest.raises(AssertionError, match="chief_ip"):
        DistributedContext(rank=0, size=4, local_rank=0, local_size=2, cross_rank=0, cross_size=2)


def test_size_one_collectives_are_identities_and_open_nothing() -> None:
    # The default ports are bound by someone else: a size-1 context must not care.
    blockers = [socket.socket() for _ in range(2)]
    try:
        for s, port in zip(blockers, (12360, 12376), strict=True):
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                pass  # already taken by something else, which serves as well
        with DistributedContext(
            rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
        ) as d:
            x = {"a": 1}
            assert d.gather(x) == [x] and d.gather(x)[0] is x  # type: ignore[index]
            assert d.allgather(x) == [x]
            assert d.broadcast(x) is x
            assert d.gather_local(x) == [x]
            assert d.allgather_local(x) == [x]
            assert d.broadcast_local(x) is x
            assert (d.get_rank(), d.get_size(), d.get_num_agents()) == (0, 1, 1)
    finally:
        for s in blockers:
            s.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rank=2, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1),
        dict(rank=0, size=2, local_rank=0, local_size=3, cross_rank=0, cross_size=1),
        dict(rank=0, size=2, local_rank=0, local_size=2, cross_rank=1, cross_size=1),
    ],
)
def test_inconsistent_ranks_raise_value_error(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="rank|size"):
        DistributedContext(**kwargs)


def test_collective_after_close_raises() -> None:
    d = DistributedContext(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
    d.close()
    with pytest.raises(RuntimeError, match="after DistributedContext.close"):
        d.allgather(1)


# §19 item 13: ports.


def test_default_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INTER_TRAIN_PROCESS_COMM_PORT_1", raising=False)
    monkeypatch.delenv("INTER_TRAIN_PROCESS_COMM_PORT_2", raising=False)
    assert default_ports() == (12360, 12376)
    monkeypatch.setenv("INTER_TRAIN_PROCESS_COMM_PORT_1", "20000")
    assert default_ports() == (20000, 20016)
    monkeypatch.setenv("INTER_TRAIN_PROCESS_COMM_PORT_2", "30000")
    assert default_ports() == (20000, 30000)
    monkeypatch.setenv("INTER_TRAIN_PROCESS_COMM_PORT_2", "nope")
    with pytest.raises(ValueError, match="INTER_TRAIN_PROCESS_COMM_PORT_2"):
        default_ports()


def test_default_ports_add_the_trials_port_offset_when_the_launcher_set_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Issue #12 item 9: on a cluster without INTER_TRAIN_PROCESS_COMM_PORT_1/_2, a context
    built directly (no factory, no core.init) still gets 12360/12376 plus the trial's
    DET_UNIQUE_PORT_OFFSET; ports the launcher exported are used as they are (the master adds
    the offset itself), never offset twice."""
    from _kit.core_env import trial_env

    from determined import _info

    for k, v in trial_env("http://127.0.0.1:1", tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DET_UNIQUE_PORT_OFFSET", "64")
    monkeypatch.delenv("INTER_TRAIN_PROCESS_COMM_PORT_1", raising=False)
    monkeypatch.delenv("INTER_TRAIN_PROCESS_COMM_PORT_2", raising=False)
    _info._reset_cluster_info_cache()
    try:
        assert default_ports() == (12424, 12440)
        monkeypatch.setenv("INTER_TRAIN_PROCESS_COMM_PORT_1", "12424")
        monkeypatch.setenv("INTER_TRAIN_PROCESS_COMM_PORT_2", "12440")
        assert default_ports() == (12424, 12440)
    finally:
        _info._reset_cluster_info_cache()


def _env_ranks(size: int, local_size: int, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per-rank environments for the factories; the ports and the chief come from env too."""
    pub, pull = w.free_ports(2)
    out = []
    for r in range(size):
        values = (r, size, r % local_size, local_size, r // local_size, size // local_size)
        env = {n: str(v) for n, v in zip(names, values, strict=True)}
        env.update(
            INTER_TRAIN_PROCESS_COMM_PORT_1=str(pub),
            INTER_TRAIN_PROCESS_COMM_PORT_2=str(pull),
            DET_CHIEF_IP="127.0.0.1",
        )
        out.append({"rank": r, "_env": env})
    return out


TORCH_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
DEEPSPEED_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


@pytest.mark.parametrize(
    "factory,names",
    [
        ("from_torch_distributed", (*TORCH_NAMES, "GROUP_WORLD_SIZE")),
        ("from_deepspeed", DEEPSPEED_NAMES),
    ],
)
def test_env_factories_map_cross_rank_and_read_port_env(
    factory: str, names: tuple[str, ...]
) -> None:
    """§19 items 7 and 13: GROUP_*/CROSS_* become cross_rank/cross_size; the ports come from
    INTER_TRAIN_PROCESS_COMM_PORT_1/_2 and the chief from DET_CHIEF_IP (2 nodes x 1 rank)."""
    results = _ok(w.run(w.from_env_factory, _env_ranks(2, 1, names), factory))
    assert results == [(0, 2, 2, [0, 1]), (1, 2, 2, [0, 1])]


def test_env_factory_missing_variable_raises_key_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in zip(TORCH_NAMES, (0, 1, 0, 1, 0), strict=True):
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("GROUP_WORLD_SIZE", raising=False)
    with pytest.raises(KeyError, match="GROUP_WORLD_SIZE"):
        DistributedContext.from_torch_distributed()
    monkeypatch.setenv("GROUP_WORLD_SIZE", "1")
    with DistributedContext.from_torch_distributed() as d:
        assert (d.get_rank(), d.get_size(), d.get_cross_size()) == (0, 1, 1)


class _FakeHorovod:
    """Stands in for the horovod module (not part of redetermined): just its rank getters."""

    def rank(self) -> int:
        return 0

    def size(self) -> int:
        return 2

    def local_rank(self) -> int:
        return 0

    def local_size(self) -> int:
        return 1

    def cross_rank(self) -> int:
        return 0

    def cross_size(self) -> int:
        return 2


def test_from_horovod_reads_the_getters_and_needs_a_chief_ip() -> None:
    with pytest.raises(AssertionError, match="DET_CHIEF_IP"):
        DistributedContext.from_horovod(_FakeHorovod())


# §19 items 9-12: collectives across real processes.


@pytest.mark.parametrize(
    "size,local_size,force_tcp",
    [(2, 2, False), (2, 2, True), (4, 4, False), (4, 2, False), (4, 2, True), (2, 1, False)],
)
def test_collectives(size: int, local_size: int, force_tcp: bool) -> None:
    results = _ok(w.run(w.collectives, w.layout(size, local_size, force_tcp=force_tcp)))
    for rank, got in enumerate(results):
        node = [rank // local_size * local_size + i for i in range(local_size)]
        local_chief = node[0]
        assert got["allgather"] == [("a", r) for r in range(size)]
        assert got["gather"] == ([("g", r) for r in range(size)] if rank == 0 else None)
        assert got["broadcast"] == ("b", 0)
        assert got["allgather_local"] == [("al", r) for r in node]
        assert got["gather_local"] == ([("gl", r) for r in node] if rank == local_chief else None)
        assert got["broadcast_local"] == ("bl", local_chief)
        cross = (rank // local_size, size // local_size, size // local_size)
        assert got["getters"] == (rank, size, rank % local_size, local_size, *cross)


def test_64_mib_payloads() -> None:
    nbytes = 64 << 20
    results = _ok(w.run(w.big_payload, w.layout(2, 2), nbytes, timeout=60))
    for got in results:
        assert got[:2] == [(nbytes, 1, 1), (nbytes, 2, 2)]
        # arrays arrive intact and writable (they travel as out-of-band pickle buffers)
        assert got[2:] == [(nbytes, 1, 1), (nbytes, 2, 1)]


@pytest.fixture(
    scope="module",
    params=[(4, 2, False), (4, 2, True), (2, 2, False)],
    ids=["4x2-unix", "4x2-tcp", "2x1-unix"],
)
def cluster(request: pytest.FixtureRequest) -> Iterator[tuple[list[Any], int, int]]:
    """Long-lived ranks (4 on 2 fake nodes, or 2 on one) that run whatever op sequences they
    are sent; node channels over unix sockets, or TCP with force_tcp."""
    size, local_size, force_tcp = request.param
    queues = w.make_queues(size + 1)
    ranks = w.layout(size, local_size, force_tcp=force_tcp)
    procs, _results = w.start(w.serve_sequences, ranks, queues)
    yield queues, size, local_size
    for q in queues[:size]:
        q.put(None)
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    assert [_results.get(timeout=5)[1] for _ in procs] == ["stopped"] * size


pytestmark = pytest.mark.timeout(90)

_OPS = ["allgather", "gather", "broadcast", "allgather_local", "gather_local", "broadcast_local"]


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seq=st.lists(
        st.tuples(st.sampled_from(_OPS), st.sampled_from([0, 10, 100_000])),
        min_size=1,
        max_size=10,
    )
)
def test_random_interleavings_stay_in_order(
    cluster: tuple[list[Any], int, int], seq: list[tuple[str, int]]
) -> None:
    """§19 item 12: any sequence of global and node-local collectives gives every rank the
    right answer, on 4 ranks over 2 nodes and on 2 ranks, over unix sockets and TCP."""
    queues, size, local_size = cluster
    for q in queues[:size]:
        q.put(seq)
    answers = dict(queues[-1].get(timeout=30) for _ in range(size))
    for rank in range(size):
        want = [w.expected(op, rank, step, n, size, local_size) for step, (op, n) in enumerate(seq)]
        assert answers[rank] == want


# Deviations and additions, each pinned (docs/core/distributed.md).


def test_mismatched_collectives_raise_runtime_error() -> None:
    results = w.run(w.mismatched, w.layout(2, 2))
    assert results[0] == "from chief"
    assert isinstance(results[1], w.Failed) and results[1].kind == "RuntimeError"
    assert "out of order" in results[1].message and "broadcast" in results[1].message


def test_allgather_returns_the_callers_own_object() -> None:
    assert _ok(w.run(w.own_entry_identity, w.layout(3, 3))) == [True, True, True]


def test_port_offset_is_added_to_both_ports() -> None:
    ranks = w.layout(2, 2)
    for kw in ranks:
        kw.update(pub_port=kw["pub_port"] - 7, pull_port=kw["pull_port"] - 7, port_offset=7)
    assert _ok(w.run(w.construct_only, ranks)) == ["ok", "ok"]


def test_machines_may_run_different_numbers_of_processes() -> None:
    """Node 0 runs 2 ranks and node 1 runs 1; the reference hangs here."""
    ranks = w.layout(3, 3)
    for kw in ranks:
        kw.update(local_size=2, cross_size=2, chief_ip="127.0.0.1")
    ranks[2].update(local_rank=0, local_size=1, cross_rank=1)
    results = _ok(w.run(w.collectives, ranks))
    assert [r["allgather_local"] for r in results] == [
        [("al", 0), ("al", 1)],
        [("al", 0), ("al", 1)],
        [("al", 2)],
    ]


def test_unix_socket_dir_is_removed_on_close(tmp_path: Any) -> None:
    results = _ok(w.run(w.tempdir_lifecycle, w.layout(2, 2), env={"TMPDIR": str(tmp_path)}))
    during, after = results[0]
    assert len(during) == 1 and after == []
    assert not any(p.name.startswith("det-ipc-") for p in tmp_path.iterdir())


# Timeouts and lost peers: where the reference hangs forever.


def test_peer_that_never_starts_times_out() -> None:
    chief, worker = w.layout(2, 2, timeout=0.5)  # the peer never comes: any wait is the same
    start = time.monotonic()
    with pytest.raises(errors.DistributedTimeout, match=r"ranks \[1\] did not connect"):
        DistributedContext(**chief)
    assert time.monotonic() - start < 5
    with pytest.raises(errors.DistributedTimeout, match="DET_CHIEF_IP"):
        DistributedContext(**worker)


def test_timeout_comes_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    chief, _ = w.layout(2, 2)
    del chief["timeout"]
    monkeypatch.setenv("DET_DISTRIBUTED_TIMEOUT", "0.5")
    start = time.monotonic()
    with pytest.raises(errors.DistributedTimeout, match="DET_DISTRIBUTED_TIMEOUT"):
        DistributedContext(**chief)
    assert time.monotonic() - start < 5


def test_chief_port_in_use_raises_os_error() -> None:
    chief, _ = w.layout(2, 2)
    with socket.socket() as s:
        s.bind(("0.0.0.0", chief["pull_port"]))
        s.listen()
        with pytest.raises(OSError, match="INTER_TRAIN_PROCESS_COMM_PORT_1"):
            DistributedContext(**chief)


@pytest.mark.parametrize("victim", [0, 2])
def test_killed_peer_makes_the_others_raise_promptly(victim: int) -> None:
    results = w.run(w.die_in_second_allgather, w.layout(4, 2), victim)
    assert isinstance(results[victim], w.Failed) and results[victim].kind == "died"
    for rank, got in enumerate(results):
        if rank == victim:
            continue
        kind, message, waited, again = got
        assert kind == "DistributedPeerLost", got
        assert waited < 5, got
        assert "failed earlier" in again


def test_busy_chief_is_not_mistaken_for_dead() -> None:
    """Heartbeats every 0.2 s (dead after 1.2 s); the chief holds the GIL for 2.5 s."""
    env = {"DET_DISTRIBUTED_HEARTBEAT": "0.2"}
    assert _ok(w.run(w.busy_chief, w.layout(3, 3), 2.5, env=env)) == [0, 0, 0]


def test_collective_timeout() -> None:
    results = w.run(w.sleepy_worker, w.layout(2, 2, collective_timeout=0.5), 2.0)
    assert isinstance(results[0], w.Failed) and results[0].kind == "DistributedTimeout"
    assert "collective_timeout=0.5" in results[0].message
    assert results[0].after < 2.0
    # the sleeper then finds the chief gone
    assert isinstance(results[1], w.Failed) and results[1].kind == "DistributedPeerLost"
