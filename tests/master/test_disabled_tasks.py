"""Agents and slots against tasks (issue #34 item 6): ``GET /api/v1/agents/{a}/slots[/{s}]``
(read with 0.37's bindings after 0.37's ``det slot disable``); a slot or agent disabled
without draining kills the commands on it (a command without slots runs on an agent too) and
takes no new ones until it is enabled again."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pytest
from _kit.reference import Ref
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e
CLUSTER_CPU_SLOTS = 2

_GET_SLOT = r"""
import json, sys
from determined.common.api import authentication, bindings
sess = authentication.login(sys.argv[1], "admin", "")
slot = bindings.get_GetSlot(sess, agentId=sys.argv[2], slotId=sys.argv[3]).slot
every = bindings.get_GetSlots(sess, agentId=sys.argv[2]).slots
print(json.dumps({"enabled": slot.enabled, "id": slot.id, "n": len(every)}))
"""


def _ok(r: Any) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def _state(cluster: Cluster, task_id: str, *states: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        command = cluster.get(f"/api/v1/commands/{task_id}")["command"]
        if command["state"] in states:
            return dict(command)
        assert time.monotonic() < deadline, f"command {task_id} is {command['state']}"
        time.sleep(0.2)


def _sleeper(cluster: Cluster, slots: int) -> str:
    config = {"entrypoint": ["sleep", "300"], "resources": {"slots": slots}}
    return str(
        _ok(cluster.s.post(cluster.url + "/api/v1/commands", json={"config": config}))["command"][
            "id"
        ]
    )


def _log(cluster: Cluster, task_id: str) -> str:
    return "".join(line["log"] for line in cluster.get(f"/api/v1/tasks/{task_id}/logs")["logs"])


def test_get_slot_and_disabling_kills_the_commands_there(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    api = cluster.url + "/api/v1"
    (agent,) = cluster.get("/api/v1/agents")["agents"]
    agent_id = agent["id"]
    ref = Ref(cluster.master, tmp_path / "ref")
    ref.env["DET_USER"] = "admin"  # slots are enabled and disabled by admins
    ref.det("slot", "disable", agent_id, "0")
    assert ref.python(_GET_SLOT, agent_id, "0") == {"enabled": False, "id": "0", "n": 2}
    ref.det("slot", "enable", agent_id, "0")
    assert ref.python(_GET_SLOT, agent_id, "0")["enabled"] is True
    assert cluster.s.get(api + f"/agents/{agent_id}/slots/7").status_code == 404
    assert cluster.s.get(api + "/agents/nobody/slots/0").status_code == 404

    # A command on a slot: that slot disabled (no drain) kills it; the other slot's goes on.
    first = _sleeper(cluster, 1)
    _state(cluster, first, "STATE_RUNNING")
    second = _sleeper(cluster, 1)
    _state(cluster, second, "STATE_RUNNING")
    busy = {
        slot["container"]["id"]: slot_id
        for slot_id, slot in cluster.get(f"/api/v1/agents/{agent_id}")["agent"]["slots"].items()
        if slot.get("container")
    }
    first_alloc = cluster.get(f"/api/v1/commands/{first}")["command"]["container"]["id"]
    slot_id = busy[first_alloc]
    _ok(cluster.s.post(api + f"/agents/{agent_id}/slots/{slot_id}/disable", json={}))
    _state(cluster, first, "STATE_TERMINATED", timeout=20)
    assert "its agent or slot was disabled" in _log(cluster, first)
    assert cluster.get(f"/api/v1/commands/{second}")["command"]["state"] == "STATE_RUNNING"
    # The disabled slot takes no new command; enabled again, it does.
    third = _sleeper(cluster, 1)
    time.sleep(2)
    assert cluster.get(f"/api/v1/commands/{third}")["command"]["state"] == "STATE_QUEUED"
    _ok(cluster.s.post(api + f"/agents/{agent_id}/slots/{slot_id}/enable"))
    _state(cluster, third, "STATE_RUNNING")
    for task_id in (second, third):
        _ok(cluster.s.post(api + f"/commands/{task_id}/kill"))


def test_a_disabled_agent_kills_and_holds_commands_without_slots(cluster: Cluster) -> None:
    api = cluster.url + "/api/v1"
    (agent,) = cluster.get("/api/v1/agents")["agents"]
    # Drained, an agent's slots show disabled and draining (0.37's v1Slot), and back.
    _ok(cluster.s.post(api + f"/agents/{agent['id']}/disable", json={"drain": True}))
    slot = cluster.get(f"/api/v1/agents/{agent['id']}/slots/0")["slot"]
    assert (slot["enabled"], slot["draining"]) == (False, True)
    _ok(cluster.s.post(api + f"/agents/{agent['id']}/enable"))
    slot = cluster.get(f"/api/v1/agents/{agent['id']}/slots/0")["slot"]
    assert (slot["enabled"], slot["draining"]) == (True, False)
    zero = _sleeper(cluster, 0)
    _state(cluster, zero, "STATE_RUNNING")
    _ok(cluster.s.post(api + f"/agents/{agent['id']}/disable", json={"drain": False}))
    try:
        _state(cluster, zero, "STATE_TERMINATED", timeout=20)
        held = _sleeper(cluster, 0)
        time.sleep(2)
        assert cluster.get(f"/api/v1/commands/{held}")["command"]["state"] == "STATE_QUEUED"
    finally:
        _ok(cluster.s.post(api + f"/agents/{agent['id']}/enable"))
    _state(cluster, held, "STATE_RUNNING")
    _ok(cluster.s.post(api + f"/commands/{held}/kill"))
