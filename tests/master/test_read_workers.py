"""determined/master/_read_workers.py: the heavy reads answered by the master's worker
processes (the default, two of them) say what the same read functions say in-process; a read
function's error is answered as it is in-process; a worker that dies is replaced and its read
still answered; the workers end with the master, even on kill -9. The answers are compared on
SQLite and PostgreSQL; the rest is the same code on both."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import time
import uuid
from typing import Any

import pytest
from _kit.master import MasterProcess, Run

from determined.master._read_workers import READ_WORKER_NICE, encode
from determined.master.api._experiment_filters import ExperimentFilter, IdFilter
from determined.master.api._experiments import describe_experiment, experiment_page
from determined.master.api._logs import trial_log_body
from determined.master.api._time_series import metric_groups, trial_series
from determined.master.store import _engine

pytestmark = pytest.mark.e2e


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.update(int(p) for p in text)
    return out


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _write_worker(master: MasterProcess, timeout: float = 20.0) -> int:
    """The pid of the master's write worker, once it is ready."""
    deadline = time.monotonic() + timeout
    while True:
        r = master.session().get(master.url + "/api/v1/dev/group-commit")
        assert r.status_code == 200, r.text
        pid = r.json()["writeWorkerPid"]
        if pid is not None:
            return int(pid)
        assert time.monotonic() < deadline, "the write worker never became ready"
        time.sleep(0.1)


def _workers(master: MasterProcess, count: int = 2, timeout: float = 20.0) -> set[int]:
    """The master's read workers (its children but the write worker)."""
    assert master.proc is not None
    writer = _write_worker(master)
    deadline = time.monotonic() + timeout
    while True:
        found = {p for p in _children(master.proc.pid) if _alive(p) and p != writer}
        if len(found) == count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _without_duration(obj: Any) -> Any:
    """``obj`` without the ``duration`` fields (an experiment's age: it grows between reads)."""
    if isinstance(obj, dict):
        return {k: _without_duration(v) for k, v in obj.items() if k != "duration"}
    if isinstance(obj, list):
        return [_without_duration(v) for v in obj]
    return obj


def _filter(**over: Any) -> ExperimentFilter:
    fields: dict[str, Any] = {
        "name": "",
        "description": "",
        "labels": [],
        "states": [],
        "users": [],
        "user_ids": [],
        "archived": None,
        "hide_archived_parents": False,
        "ids": IdFilter(None, None, None, None, [], []),
    }
    fields.update(over)
    return ExperimentFilter(**fields)


def _populate(master: MasterProcess) -> list[Run]:
    runs = [Run(master) for _ in range(3)]
    for i, run in enumerate(runs):
        for step in (1, 2, 3):
            assert run.metrics("training", step, {"loss": 1.0 / step + i}).status_code == 200
        assert run.metrics("validation", 3, {"loss": 0.5 + i}).status_code == 200
    ckpt = {
        "uuid": str(uuid.uuid4()),
        "taskId": runs[0].task_id,
        "allocationId": runs[0].allocation_id,
        "reportTime": "2024-05-06T07:08:09Z",
        "resources": {"model.pt": "100"},
        "metadata": {"steps_completed": 3},
    }
    assert runs[0].post("/api/v1/checkpoints", json=ckpt).status_code == 200
    logs = [{"taskId": runs[0].task_id, "log": f"line {i}\n"} for i in range(30)]
    assert runs[0].post("/api/v1/task/logs", json={"logs": logs}).status_code == 200
    return runs


@pytest.mark.both_stores
def test_workers_answer_what_the_read_functions_answer_in_process(master: MasterProcess) -> None:
    assert len(_workers(master)) == 2  # the default
    runs = _populate(master)
    s = master.session()
    first, second = runs[0], runs[1]
    ids = [first.trial_id, second.trial_id]
    by_http = {
        "list": s.get(master.url + "/api/v1/experiments", params={"limit": 2}),
        "list by state, desc": s.get(
            master.url + "/api/v1/experiments",
            params={"sortBy": "SORT_BY_STATE", "orderBy": "ORDER_BY_DESC"},
        ),
        "describe": s.get(master.url + f"/api/v1/experiments/{first.experiment_id}"),
        "series": s.get(
            master.url + "/api/v1/trials/time-series",
            params={"trialIds": ids, "metricNames": ["loss"], "metricType": "METRIC_TYPE_TRAINING"},
        ),
    }
    engine = _engine.make_engine(master.store_url)
    try:
        with engine.connect() as conn:
            in_process = {
                "list": experiment_page(
                    conn, _filter(), 0, "SORT_BY_UNSPECIFIED", "ORDER_BY_UNSPECIFIED", 0, 2
                ),
                "list by state, desc": experiment_page(
                    conn, _filter(), 0, "SORT_BY_STATE", "ORDER_BY_DESC", 0, 0
                ),
                "describe": describe_experiment(conn, first.experiment_id, True),
                "series": trial_series(
                    conn,
                    ids,
                    metric_groups(["loss"], [], "", "METRIC_TYPE_TRAINING"),
                    0,
                    2**31 - 1,
                    1000,
                ),
            }
    finally:
        engine.dispose()
    # A logs tail is NDJSON lines, not one JSON value: the same bytes both ways.
    tail = s.get(master.url + f"/api/v1/trials/{first.trial_id}/logs", params={"tail": 20})
    with engine.connect() as conn:
        tail_in_process = trial_log_body(conn, first.trial_id, 0, 20, 0, False, 20)
    engine.dispose()
    assert tail.status_code == 200 and tail.content == tail_in_process
    # A trial that does not exist: 404 from the worker, as in-process.
    missing = s.get(master.url + "/api/v1/trials/987654/logs", params={"tail": 20})
    assert missing.status_code == 404 and "987654" in missing.json()["message"], missing.text
    lines = [json.loads(line)["result"]["log"] for line in tail.content.splitlines()]
    assert lines == [f"line {i}\n" for i in range(10, 30)]
    for name, r in by_http.items():
        assert r.status_code == 200, (name, r.text)
        # The same JSON, written the same way (only the experiments' age moved on).
        assert _without_duration(r.json()) == _without_duration(in_process[name]), name
        assert r.headers["content-type"] == "application/json"
        assert r.content == encode(r.json())
    series = by_http["series"].json()["trials"]
    assert [t["trial"]["id"] for t in series] == ids
    assert [p["batches"] for p in series[0]["metrics"][0]["data"]] == [1, 2, 3]
    listed = by_http["list"].json()
    assert listed["pagination"]["total"] == 3 and len(listed["experiments"]) == 2


def test_the_workers_yield_the_cpu_to_the_master_and_its_writes(master: MasterProcess) -> None:
    assert READ_WORKER_NICE > 0
    assert master.proc is not None
    mine = os.getpriority(os.PRIO_PROCESS, master.proc.pid)
    for pid in _workers(master):
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + READ_WORKER_NICE)
    assert os.getpriority(os.PRIO_PROCESS, _write_worker(master)) == mine


def test_a_read_functions_error_is_answered_as_in_process(master: MasterProcess) -> None:
    assert len(_workers(master)) == 2
    s = master.session()
    r = s.get(master.url + "/api/v1/experiments/987654")
    assert r.status_code == 404
    assert r.json()["message"] == "experiment 987654 not found"
    r = s.get(master.url + "/api/v1/trials/time-series", params={"trialIds": [987654]})
    assert r.status_code == 404 and "trial 987654" in r.json()["message"]
    r = s.get(master.url + "/api/v1/experiments", params={"projectId": 987654})
    assert r.status_code == 404


def test_a_dead_worker_is_replaced_and_its_read_still_answered(master: MasterProcess) -> None:
    run = Run(master)
    before = _workers(master)
    assert len(before) == 2
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    s = master.session()
    for _ in range(3):  # the first finds the pool broken: answered in-process
        r = s.get(master.url + f"/api/v1/experiments/{run.experiment_id}")
        assert r.status_code == 200, r.text
        assert r.json()["experiment"]["id"] == run.experiment_id
    after = _workers(master)
    assert len(after) == 2 and not after & before
    r = s.get(master.url + "/api/v1/experiments")
    assert r.status_code == 200 and r.json()["pagination"]["total"] == 1
    assert "a read worker died" in master.log.read_text()


def test_the_workers_end_with_the_master_even_on_kill_9(master: MasterProcess) -> None:
    workers = _workers(master)
    assert len(workers) == 2
    writer = _write_worker(master)
    assert _alive(writer)
    workers.add(writer)
    assert master.proc is not None
    master.proc.send_signal(signal.SIGKILL)
    master.proc.wait(10)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in workers if _alive(p)]


def test_zero_read_workers_answer_in_the_masters_process(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path, args=["--read-workers", "0"]) as m:
        assert _workers(m, count=0, timeout=2) == set()
        run = Run(m)
        r = m.session().get(m.url + f"/api/v1/experiments/{run.experiment_id}")
        assert r.status_code == 200
        assert json.loads(r.content)["experiment"]["id"] == run.experiment_id


def test_the_local_resource_managers_master_forks_its_workers_directly(
    tmp_path: pathlib.Path,
) -> None:
    # A fork server instead (the master already had a thread, its trial-log writer) cost
    # every master start ~1.3 s of importing on 2 cores.
    with MasterProcess(tmp_path, cpu_slots=1) as m:
        assert m.proc is not None
        workers = _workers(m)
        master_cmdline = pathlib.Path(f"/proc/{m.proc.pid}/cmdline").read_bytes()
        assert len(workers) == 2
        writer = _write_worker(m)
        assert writer in _children(m.proc.pid)
        for pid in workers | {writer}:
            assert pathlib.Path(f"/proc/{pid}/cmdline").read_bytes() == master_cmdline
