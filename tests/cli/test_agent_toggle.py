"""Agent and slot enable/disable (``det agent|slot enable|disable``, 0.37's routes) and the
job queue (``det job update``, ``POST /api/v1/job-queues``) on the local resource manager,
with our CLI and 0.37's: a disabled slot takes no new work, without ``--drain`` the work on it
is killed and runs again elsewhere, the states outlive a master restart; a job moved ahead
starts first."""

from __future__ import annotations

import json
import pathlib
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.reference import Ref

pytestmark = pytest.mark.e2e

SLEEPER = """\
name: sleeper
entrypoint: python3 -c "import time; time.sleep(120)"
resources:
  slots_per_trial: 1
searcher:
  name: single
  metric: loss
  max_length: 1
hyperparameters: {}
max_restarts: 0
"""


def _json(out: str) -> Any:
    start = min(i for i in (out.find("["), out.find("{")) if i >= 0)
    return json.loads(out[start:])


def _wait(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _create(det: Det, tmp_path: pathlib.Path, name: str = "sleeper") -> None:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "x.py").write_text("")
    (tmp_path / "sleeper.yaml").write_text(SLEEPER.replace("sleeper", name, 1))
    det.ok("e", "create", str(tmp_path / "sleeper.yaml"), str(model))


def _busy(det: Det) -> dict[str, str]:
    """Agent id -> allocation id of the slots in use."""
    slots = json.loads(det.ok("slot", "list", "--json"))
    return {s["agent_id"]: s["allocation_id"] for s in slots if s["allocation_id"] != "FREE"}


def test_disable_drain_kill_and_restart(tmp_path: pathlib.Path) -> None:
    host = socket.gethostname()
    a0, a1 = f"{host}-0", f"{host}-1"
    master = MasterProcess(tmp_path / "data", cpu_slots=2, slots_per_agent=1)
    with master:
        plain = Det(tmp_path / "plain", master.url)
        r = plain("agent", "disable", a0)
        assert r.returncode == 1 and "only an admin may disable agents" in r.stderr
        det = Det(tmp_path / "home", master.url)
        det.ok("user", "login", "admin", input="\n")
        ref = Ref(master, tmp_path / "ref")
        ref.env["DET_USER"] = "admin"
        r = det("agent", "disable", "no-such-agent")
        assert r.returncode == 1 and "not found" in r.stderr and "HTTP 404" in r.stderr
        r = det("slot", "enable", a0, "7")
        assert r.returncode == 1 and "slot '7' not found" in r.stderr
        # Agent 1's slot is off: the trial can only start on agent 0.
        out = ref.det("slot", "disable", a1, "1")
        assert f"Disabled slot 1 of agent {a1}" in out
        pools = master.session().get(master.url + "/api/v1/resource-pools").json()
        assert pools["resourcePools"][0]["slotsAvailable"] == 1
        _create(det, tmp_path)
        (first,) = _wait("the trial to run", lambda: _busy(det)).items()
        assert first[0] == a0
        ref.det("slot", "enable", a1, "1")

        # Draining: the trial keeps running; the agent shows disabled and draining.
        out = det.ok("agent", "disable", a0, "--drain")
        assert "Tasks still in progress on draining nodes." in out
        agents = {a["id"]: a for a in json.loads(det.ok("agent", "list", "--json"))}
        assert (agents[a0]["enabled"], agents[a0]["draining"]) == (False, True)
        assert agents[a1]["enabled"] is True
        time.sleep(1.5)
        assert _busy(det) == {a0: first[1]}

        # Disabled without draining (0.37's CLI): the run is killed, the trial runs again on
        # agent 1 with no restart counted.
        out = ref.det("agent", "disable", a0)
        assert f"Disabled agent {a0}." in out
        moved = _wait("the trial to move", lambda: (b := _busy(det)) and a0 not in b and b)
        assert list(moved) == [a1] and moved[a1] != first[1]
        logs = det.ok("t", "logs", "1")
        assert "reason: its agent or slot was disabled" in logs

        ref_agents = {a["id"]: a for a in _json(ref.det("agent", "list", "--json"))}
        assert (ref_agents[a0]["enabled"], ref_agents[a0]["draining"]) == (False, False)
        slots = _json(ref.det("slot", "list", "--json"))
        assert [s["allocation_id"] != "FREE" for s in slots] == [False, True]

    # The states outlive a restart; the trial, killed with the master, runs again on agent 1.
    master.start()
    try:
        det = Det(tmp_path / "home", master.url)
        agents = {a["id"]: a for a in json.loads(det.ok("agent", "list", "--json"))}
        assert agents[a0]["enabled"] is False and agents[a1]["enabled"] is True
        assert list(_wait("the trial to run again", lambda: _busy(det))) == [a1]
        ref = Ref(master, tmp_path / "ref")
        ref.env["DET_USER"] = "admin"
        ref.det("agent", "enable", "--all")
        assert all(a["enabled"] for a in json.loads(det.ok("agent", "list", "--json")))
        det.ok("e", "kill", "1")
    finally:
        master.stop()


def _jobs(det: Det) -> list[tuple[str, str, int, int]]:
    jobs = json.loads(det.ok("job", "list", "--json"))["jobs"]
    return [
        (j["jobId"], j["summary"]["state"], j["summary"]["jobsAhead"], j["priority"]) for j in jobs
    ]


def test_job_update_moves_a_job_ahead(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path / "data", cpu_slots=1) as master:
        det = Det(tmp_path / "home", master.url)
        ref = Ref(master, tmp_path / "ref")
        for name in ("first", "second", "third"):
            _create(det, tmp_path, name)
        _wait("the first to run", lambda: _jobs(det)[0][1] == "STATE_SCHEDULED")
        assert _jobs(det) == [
            ("experiment-1", "STATE_SCHEDULED", 0, 42),
            ("experiment-2", "STATE_QUEUED", 1, 42),
            ("experiment-3", "STATE_QUEUED", 2, 42),
        ]
        # 0.37's CLI: a smaller number goes first.
        ref.det("job", "update", "experiment-3", "--priority", "10")
        assert [j[:3] for j in _jobs(det)] == [
            ("experiment-3", "STATE_QUEUED", 0),
            ("experiment-1", "STATE_SCHEDULED", 1),
            ("experiment-2", "STATE_QUEUED", 2),
        ]
        # ahead-of: experiment 2 takes experiment 3's priority and stands before it.
        det.ok("job", "update", "experiment-2", "--ahead-of", "experiment-3")
        assert [(j[0], j[3]) for j in _jobs(det)] == [
            ("experiment-2", 10),
            ("experiment-3", 10),
            ("experiment-1", 42),
        ]
        ref_jobs = _json(ref.det("job", "list", "--json"))["jobs"]
        assert [j["jobId"] for j in ref_jobs] == ["experiment-2", "experiment-3", "experiment-1"]
        # update-batch and weight, through 0.37's CLI; the priority is in the config too.
        ref.det("job", "update-batch", "experiment-1.priority=50", "experiment-1.weight=2")
        exp = master.session().get(master.url + "/api/v1/experiments/1").json()["experiment"]
        assert exp["config"]["resources"]["priority"] == 50
        assert exp["config"]["resources"]["weight"] == 2
        r = det("job", "update", "experiment-1", "--behind-of", "experiment-1")
        assert r.returncode == 1 and "itself" in r.stderr
        r = det("job", "update", "experiment-9", "-p", "3")
        assert r.returncode == 1 and "HTTP 404" in r.stderr

        # The slot frees: the job moved ahead starts first, the other stays queued.
        det.ok("e", "kill", "1")
        _wait(
            "experiment 2 to run", lambda: _jobs(det)[0][:2] == ("experiment-2", "STATE_SCHEDULED")
        )
        assert _jobs(det)[1][:2] == ("experiment-3", "STATE_QUEUED")
        # behind-of through the REST route: experiment 3 goes behind 2 (still first in line).
        body = {"updates": [{"jobId": "experiment-3", "behindOf": "experiment-2"}]}
        assert master.session().post(master.url + "/api/v1/job-queues", json=body).ok
        assert [j[0] for j in _jobs(det)] == ["experiment-2", "experiment-3"]
        # det e set priority feeds the same order.
        det.ok("e", "set", "priority", "3", "1")
        assert [(j[0], j[3]) for j in _jobs(det)] == [("experiment-3", 1), ("experiment-2", 10)]
        det.ok("e", "kill", "2")
        det.ok("e", "kill", "3")
