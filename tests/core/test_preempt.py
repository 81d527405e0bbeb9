"""PreemptContext: the master's signal on a cluster, SIGTERM/SIGINT locally
(docs/reference/harness.md §5; §19 items 23-24; our local-signal deviation)."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from _kit import dist_worker as w
from _kit.core_env import ALLOCATION_ID, trial_env
from _kit.recording_master import RecordingMaster, Request

from determined import core

LOCAL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    from determined import core

    with core.init() as ctx:
        print("before", ctx.preempt.should_preempt(), flush=True)
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        time.sleep(0.1)
        print("after", ctx.preempt.should_preempt(), flush=True)
        if len(sys.argv) > 2:
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C
            time.sleep(5)
            print("survived", flush=True)
    print("exited cleanly", flush=True)
    """
)


def run_local(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LOCAL_SCRIPT, *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_local_signal_requests_preemption(sig: str) -> None:
    out = run_local(sig)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["before False", "after True", "exited cleanly"]
    assert "preemption requested" in out.stderr


def test_second_ctrl_c_interrupts_at_once() -> None:
    out = run_local("SIGINT", "again")
    assert "after True" in out.stdout
    assert "survived" not in out.stdout
    assert "KeyboardInterrupt" in out.stderr
    assert out.returncode != 0


def test_local_handlers_are_restored_on_close() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with core.init() as ctx:
        assert signal.getsignal(signal.SIGTERM) is not before
        assert ctx.preempt.should_preempt() is False
    assert signal.getsignal(signal.SIGTERM) is before


def test_should_preempt_before_start_raises() -> None:
    ctx = core.init()
    with pytest.raises(RuntimeError, match="before start"):
        ctx.preempt.should_preempt()
    ctx.close()


def test_entering_twice_raises() -> None:
    with core.init() as ctx, pytest.raises(RuntimeError, match="only be called once"):
        ctx.__enter__()


def test_master_preemption_sends_exactly_one_ack(cluster_trial: RecordingMaster) -> None:
    polls: list[str] = []

    def preemption(req: Request, _m: object) -> tuple[int, dict]:
        polls.append(req.query["timeout_seconds"][0])
        return 200, {"preempt": len(polls) >= 2}

    cluster_trial.route("GET", r"/signals/preemption", preemption)
    with core.init() as ctx:
        deadline = time.monotonic() + 10
        while not ctx.preempt.should_preempt() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.should_preempt() is True
    assert polls[:2] == ["0", "60"]
    acks = cluster_trial.find("POST", rf"/allocations/{ALLOCATION_ID}/signals/ack_preemption")
    assert len(acks) == 1


def test_no_ack_without_auto_ack(cluster_trial: RecordingMaster) -> None:
    cluster_trial.route("GET", r"/signals/preemption", {"preempt": True})
    with core.init() as ctx:
        assert ctx.preempt.should_preempt(auto_ack=False) is True
        assert cluster_trial.find("POST", r"/ack_preemption") == []
        ctx.preempt.acknowledge_preemption_signal()
    assert len(cluster_trial.find("POST", r"/ack_preemption")) == 1


def test_local_ranks_follow_the_chiefs_signal_and_chief_only_refuses_workers(
    tmp_path: pathlib.Path,
) -> None:
    """§19 item 23 (a worker in ChiefOnly mode raises) with 2 real processes; the chief's
    SIGTERM becomes every rank's answer in WorkersAskChief mode."""
    results = w.run(w.local_core_ranks, w.layout(2, 2), env={"DET_HOME": str(tmp_path)})
    chief, worker = results
    assert not isinstance(chief, w.Failed) and not isinstance(worker, w.Failed), results
    for got in (chief, worker):
        assert got["before"] is False
        assert got["after"] == [True, True]
        assert got["ops"] == [1]
    assert chief["preempt_chief_only"] == "no error"
    assert worker["preempt_chief_only"].startswith("RuntimeError: preempt_mode=ChiefOnly")
    assert worker["worker_report"].startswith("RuntimeError") and "chief" in worker["worker_report"]
    assert worker["searcher_chief_only"].startswith("RuntimeError")


def test_dummy_preempt_context_is_never_preempted() -> None:
    """§19 item 24, first half: the Dummy answers False and keeps the ChiefOnly rules."""
    with core.DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    ) as d:
        dummy = core.DummyPreemptContext(d, core.PreemptMode.ChiefOnly)
        with pytest.raises(RuntimeError, match="before start"):
            dummy.should_preempt()
        with dummy:
            assert [dummy.should_preempt() for _ in range(3)] == [False, False, False]
            dummy.acknowledge_preemption_signal()  # nothing to tell: no error


@pytest.mark.parametrize("mode", ["WORKERS_ASK_CHIEF", "WORKERS_ASK_MASTER"])
def test_two_rank_trial_asks_the_master_per_mode(
    cluster_trial: RecordingMaster, tmp_path: pathlib.Path, mode: str
) -> None:
    """WorkersAskChief: only the chief polls and acknowledges, workers get its answer.
    WorkersAskMaster: every rank polls and acknowledges on its own (§5)."""
    cluster_trial.route("GET", r"/signals/preemption", {"preempt": True})
    env = trial_env(cluster_trial.url, tmp_path / "storage")
    env["DET_SLOT_IDS"] = "[0, 1]"
    results = w.run(w.cluster_preempt_ranks, w.layout(2, 2), mode, env=env)
    assert results == [[True, True], [True, True]], results
    first_polls = [
        r
        for r in cluster_trial.find("GET", r"/signals/preemption")
        if r.query["timeout_seconds"] == ["0"]
    ]
    acks = cluster_trial.find("POST", rf"/allocations/{ALLOCATION_ID}/signals/ack_preemption")
    ranks_asking = 1 if mode == "WORKERS_ASK_CHIEF" else 2
    assert (len(first_polls), len(acks)) == (ranks_asking, ranks_asking)
    for req in first_polls + acks:
        assert req.header("Grpc-Metadata-x-allocation-token") == "Bearer alloc-token"
