"""``det agent list``, ``det slot list``, ``det task list|logs``, ``det job list|update`` and
``GET /api/v1/agents``, ``/api/v1/tasks``, ``/api/v1/job-queues-v2``: the local resource
manager's simulated agents and the trial running on a slot; with our CLI and 0.37's against
our master."""

from __future__ import annotations

import csv
import io
import json
import pathlib
import socket
import time

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.reference import Ref

pytestmark = pytest.mark.e2e

SLEEPER = """\
name: sleeper
entrypoint: python3 -c "import time; time.sleep(60)"
resources:
  slots_per_trial: 1
searcher:
  name: single
  metric: loss
  max_length: 1
hyperparameters: {}
"""


def test_agents_and_slots_show_what_runs(tmp_path: pathlib.Path) -> None:
    host = socket.gethostname()
    with MasterProcess(tmp_path / "data", cpu_slots=2, slots_per_agent=1) as master:
        det = Det(tmp_path / "home", master.url)
        agents = json.loads(det.ok("agent", "list", "--json"))
        assert [a["id"] for a in agents] == [f"{host}-0", f"{host}-1"]
        assert all(a["num_slots"] == 1 and a["num_containers"] == 0 for a in agents)
        assert all(a["resource_pools"] == "default" and a["enabled"] for a in agents)
        table = det.ok("agent", "ls")
        assert table.splitlines()[0].split("|")[0].strip() == "Agent ID"

        model = tmp_path / "model"
        model.mkdir()
        (model / "x.py").write_text("")
        (tmp_path / "sleeper.yaml").write_text(SLEEPER)
        det.ok("e", "create", str(tmp_path / "sleeper.yaml"), str(model))
        deadline = time.monotonic() + 60
        busy: list[dict] = []
        while time.monotonic() < deadline and not busy:
            slots = json.loads(det.ok("slot", "list", "--json"))
            busy = [s for s in slots if s["allocation_id"] != "FREE"]
            time.sleep(0.3)
        assert len(busy) == 1, slots
        assert busy[0]["task_name"] == "Trial 1 (Experiment 1)"
        assert busy[0]["type"] == "cpu" and busy[0]["device"] == "CPU"
        assert sum(s["allocation_id"] == "FREE" for s in slots) == 1
        rows = list(csv.reader(io.StringIO(det.ok("slot", "ls", "--csv"))))
        assert rows[0] == [
            "Agent ID", "Resource Pool", "Slot ID", "Enabled", "Draining",
            "Allocation ID", "Task Name", "Type", "Device",
        ]  # fmt: skip
        assert len(rows) == 3
        agents = json.loads(det.ok("agent", "list", "--json"))
        assert sorted(a["num_containers"] for a in agents) == [0, 1]

        # Enable/disable (tests/cli/test_agent_toggle.py) are for admins only.
        r = det("slot", "enable", f"{host}-0", "0")
        assert r.returncode == 1 and "only an admin" in r.stderr and "HTTP 403" in r.stderr

        # 0.37's own CLI reads the same wire.
        ref = Ref(master, tmp_path / "ref")
        out = ref.det("slot", "list", "--json")
        ref_slots = json.loads(out[out.index("[") : out.rindex("]") + 1])
        assert [s["task_name"] for s in ref_slots if s["allocation_id"] != "FREE"] == [
            "Trial 1 (Experiment 1)"
        ]
        assert {s["type"] for s in ref_slots} == {"cpu"}
        out = ref.det("agent", "list", "--json")
        ref_agents = json.loads(out[out.index("[") : out.rindex("]") + 1])
        assert [a["id"] for a in ref_agents] == [f"{host}-0", f"{host}-1"]

        # det task list: the trial's allocation, on the agent that runs it.
        tasks = json.loads(det.ok("task", "list", "--json"))
        (task,) = tasks.values()
        assert task["name"] == "Trial 1 (Experiment 1)" and task["slotsNeeded"] == 1
        assert list(task["resources"][0]["agentDevices"]) == [busy[0]["agent_id"]]
        table = det.ok("task", "ls").splitlines()
        assert [h.strip() for h in table[0].split("|")][:3] == ["Task ID", "Allocation ID", "Name"]
        assert busy[0]["agent_id"] in table[2]
        out = ref.det("task", "list", "--json")
        assert (
            json.loads(out[out.index("{") : out.rindex("}") + 1])[task["allocationId"]]["name"]
            == "Trial 1 (Experiment 1)"
        )

        # det job list: the queue, with the running experiment's slots.
        (job,) = json.loads(det.ok("job", "list", "--json"))["jobs"]
        assert job["jobId"] == "experiment-1" and job["summary"] == {
            "state": "STATE_SCHEDULED",
            "jobsAhead": 0,
        }
        assert (job["allocatedSlots"], job["requestedSlots"], job["priority"]) == (1, 1, 42)
        row = det.ok("job", "ls").splitlines()[2]
        assert [c.strip() for c in row.split("|")][:4] == [
            "0", "experiment-1", "TYPE_EXPERIMENT", "sleeper (1)",
        ]  # fmt: skip
        out = ref.det("job", "list", "--json")
        ref_jobs = json.loads(out[out.index("{") : out.rindex("}") + 1])["jobs"]
        assert [j["jobId"] for j in ref_jobs] == ["experiment-1"]
        assert "sleeper (1)" in ref.det("job", "list")
        r = det("job", "update", "experiment-1", "-p", "100")
        assert r.returncode == 1 and "use 1 to 99" in r.stderr and "HTTP 400" in r.stderr

        det.ok("e", "kill", "1")
        logs = det.ok("task", "logs", task["taskId"], "-f")  # ends: the task is gone
        assert "Resources for Trial 1 (Experiment 1) have started" in logs
        assert len(det.ok("task", "logs", task["taskId"], "--tail", "1").splitlines()) == 1


def test_no_resource_manager_has_no_agents(det: Det) -> None:
    assert json.loads(det.ok("agent", "list", "--json")) == []
    assert json.loads(det.ok("slot", "list", "--json")) == []
