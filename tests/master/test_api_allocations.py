"""determined/master/api/_allocations.py and api/_logs.py: preemption long poll, ack,
rendezvous, all-gather, task logs (docs/reference/master.md §6 items 37, 49)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e


def _poll(run: Run, timeout: int) -> tuple[bool, float]:
    start = time.monotonic()
    r = run.trial.get(
        run.master.url + f"/api/v1/allocations/{run.allocation_id}/signals/preemption",
        params={"timeout_seconds": timeout},
        timeout=timeout + 10,
    )
    assert r.status_code == 200, r.text
    return bool(r.json()["preempt"]), time.monotonic() - start


def test_preemption_long_poll(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert _poll(run, 0)[0] is False
    preempt, took = _poll(run, 1)
    assert preempt is False and took >= 0.9
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_poll, run, 30)
        time.sleep(0.5)
        r = run.admin.post(
            shared_master.url + f"/api/v1/dev/allocations/{run.allocation_id}/preempt"
        )
        assert r.status_code == 200
        preempt, took = waiting.result()
    assert preempt is True and took < 10
    assert _poll(run, 30)[0] is True  # at once, once preempted


def test_pausing_preempts_and_blocks_reallocation(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    assert run.admin.post(shared_master.url + f"/api/v1/experiments/{run.experiment_id}/pause").ok
    assert _poll(run, 0)[0] is True
    assert run.post(f"/api/v1/allocations/{run.allocation_id}/signals/ack_preemption").ok
    assert run.exit(0) == "STATE_PAUSED"
    r = run.admin.post(shared_master.url + f"/api/v1/dev/trials/{run.trial_id}/allocate", json={})
    assert r.status_code == 400
    assert run.admin.post(
        shared_master.url + f"/api/v1/experiments/{run.experiment_id}/activate"
    ).ok
    run.allocate()
    assert run.run_id == 2


def test_rendezvous_waits_for_every_container(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    run.exit(1)
    resources = [
        {"resourcesId": "a", "address": "10.0.0.1", "slots": 2},
        {"resourcesId": "b", "address": "10.0.0.2", "slots": 2},
    ]
    r = run.admin.post(
        shared_master.url + f"/api/v1/dev/trials/{run.trial_id}/allocate",
        json={"resources": resources},
    )
    token, aid = r.json()["token"], r.json()["allocationId"]
    s = shared_master.session(token, allocation=True)
    url = shared_master.url + f"/api/v1/allocations/{aid}/resources/{{}}/rendezvous"
    with ThreadPoolExecutor(2) as pool:
        second = pool.submit(lambda: s.get(url.format("b"), timeout=30).json())
        time.sleep(0.3)
        assert not second.done()  # blocks until "a" arrives
        first = s.get(url.format("a"), timeout=30).json()
        second_info = second.result()["rendezvousInfo"]
    info = first["rendezvousInfo"]
    assert info["addresses"] == second_info["addresses"] == ["10.0.0.1", "10.0.0.2"]
    assert (info["rank"], second_info["rank"]) == (0, 1)
    assert info["slots"] == [2, 2]
    assert s.get(url.format("zzz")).status_code == 400


def test_all_gather(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    path = f"/api/v1/allocations/{run.allocation_id}/all_gather"
    results: list[list[object]] = []

    def gather(value: int) -> None:
        body = {
            "allocationId": run.allocation_id,
            "requestUuid": "u1",
            "numPeers": 3,
            "data": value,
        }
        results.append(run.post(path, json=body, timeout=30).json()["data"])

    threads = [threading.Thread(target=gather, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 3 and all(sorted(r) == [0, 1, 2] for r in results)  # type: ignore[type-var]
    assert run.post(path, json={"requestUuid": "u2", "numPeers": 0}).status_code == 400


def test_task_logs(shared_master: MasterProcess) -> None:
    run, other = Run(shared_master), Run(shared_master)
    line = {
        "taskId": run.task_id,
        "allocationId": run.allocation_id,
        "rankId": 0,
        "timestamp": "2024-01-02T03:04:05Z",
        "level": "LOG_LEVEL_INFO",
        "stdtype": "stdout",
        "source": "task",
        "log": "hello\n",
    }
    assert run.post("/api/v1/task/logs", json={"logs": [line, {**line, "log": "world\n"}]}).ok
    foreign = {**line, "taskId": other.task_id}
    assert run.post("/api/v1/task/logs", json={"logs": [foreign]}).status_code == 403
    mixed = {"logs": [line, foreign]}
    assert run.admin.post(shared_master.url + "/api/v1/task/logs", json=mixed).status_code == 400
    logs = run.get(f"/api/v1/tasks/{run.task_id}/logs")["logs"]
    assert [entry["log"] for entry in logs] == ["hello\n", "world\n"]
    assert logs[0]["rankId"] == 0 and logs[0]["timestamp"].startswith("2024-01-02T03:04:05")


def test_context_directory(shared_master: MasterProcess) -> None:
    import base64
    import io
    import tarfile

    admin = shared_master.session()
    content = base64.b64encode(b"print('hi')\n").decode()
    body = {
        "config": "entrypoint: x\nsearcher: {name: single, metric: loss, max_length: 1}\n",
        "modelDefinition": [{"path": "train.py", "type": "48", "content": content, "mode": 420}],
    }
    exp_id = admin.post(shared_master.url + "/api/v1/experiments", json=body).json()["experiment"][
        "id"
    ]
    trial = admin.get(shared_master.url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"][
        0
    ]
    tgz = admin.get(shared_master.url + f"/api/v1/tasks/{trial['taskId']}/context_directory").json()
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(tgz["b64Tgz"]))) as tar:
        member = tar.extractfile("train.py")
        assert member is not None and member.read() == b"print('hi')\n"


def test_task_logs_of_another_users_task_are_refused(shared_master: MasterProcess) -> None:
    """A user's token adds lines only to its own tasks' logs (an admin's to any): the
    experiment's owner is admin here, so the default user 'determined' is refused."""
    from _kit.master import login

    run = Run(shared_master)
    line = {"taskId": run.task_id, "log": "not mine\n"}
    url = shared_master.url + "/api/v1/task/logs"
    other = {"Authorization": f"Bearer {login(shared_master.url, 'determined')}"}
    r = requests.post(url, json={"logs": [line]}, headers=other)
    assert r.status_code == 403 and "another user's" in r.json()["message"]
    r = requests.post(url, json={"logs": [{**line, "taskId": "no-such-task"}]}, headers=other)
    assert r.status_code == 404
    assert run.admin.post(url, json={"logs": [{**line, "log": "admin\n"}]}).status_code == 200
    logs = run.get(f"/api/v1/tasks/{run.task_id}/logs")["logs"]
    assert [entry["log"] for entry in logs] == ["admin\n"]
