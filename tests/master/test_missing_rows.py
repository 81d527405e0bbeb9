"""A row that is not there is a 404, never a KeyError (a 500): the store's ``require_*``
getters, routes asked about ids that do not exist, and a trial deleted while its logs are
followed. Also: the typed rows of determined/master/store/_rows.py name every column."""

from __future__ import annotations

import pathlib
import threading
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess, Run

from determined.master._errors import NotFound
from determined.master.store import (
    AllocationRow,
    CheckpointRow,
    ExperimentRow,
    LiveAllocationRow,
    State,
    Store,
    TrialRow,
    _checkpoints,
    _experiments,
    _trials,
    _users,
    sqlite_url,
)
from determined.master.store._schema import allocations, checkpoints, experiments, trials

MISSING = 999_999
INVALID_HP = "EXITED_REASON_INVALID_HP"
ONE = {"length": 1}


def _keys(row_type: Any) -> set[str]:
    return set(row_type.__required_keys__ | row_type.__optional_keys__)


def test_typed_rows_name_every_column() -> None:
    assert _keys(ExperimentRow) == set(experiments.c.keys())
    assert _keys(TrialRow) == set(trials.c.keys())
    assert _keys(AllocationRow) == set(allocations.c.keys())
    assert _keys(LiveAllocationRow) == set(allocations.c.keys()) | {"trial_state"}
    assert _keys(CheckpointRow) == set(checkpoints.c.keys())


def test_require_getters_raise_not_found(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    try:
        with store.read() as conn:
            for require, key in [
                (_experiments.require_experiment, MISSING),
                (_trials.require_trial, MISSING),
                (_trials.require_allocation, "no.such.allocation"),
                (_checkpoints.require, "no-such-uuid"),
                (_users.require_user, MISSING),
            ]:
                with pytest.raises(NotFound, match=f"{key} not found") as caught:
                    require(conn, key)
                assert caught.value.status == 404
    finally:
        store.close()


def test_getters_return_every_column(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    try:
        with store.tx() as conn:
            exp_id = _experiments.insert_experiment(
                conn,
                config={"searcher": {"name": "single"}},
                original_config="",
                model_definition=None,
                owner_id=1,
            )
            trial_id = _trials.insert_trial(
                conn, experiment_id=exp_id, request_id="r1", hparams={}, seed=1, state=State.ACTIVE
            )
            alloc = _trials.insert_allocation(conn, trial_id, [])
            _checkpoints.insert(
                conn,
                uuid="c1",
                trial_id=trial_id,
                task_id=alloc["task_id"],
                allocation_id=alloc["id"],
                report_time=None,
                resources={"a": 1},
                metadata={"steps_completed": 1},
                storage=None,
            )
        with store.read() as conn:
            assert set(_experiments.require_experiment(conn, exp_id)) == _keys(ExperimentRow)
            assert set(_trials.require_trial(conn, trial_id)) == _keys(TrialRow)
            assert set(_trials.require_allocation(conn, alloc["id"])) == _keys(AllocationRow)
            assert set(_trials.live_allocations(conn)[0]) == _keys(LiveAllocationRow)
            assert set(_checkpoints.require(conn, "c1")) == _keys(CheckpointRow)
    finally:
        store.close()


@pytest.mark.e2e
def test_routes_answer_404_for_missing_ids(shared_master: MasterProcess) -> None:
    admin = shared_master.session()
    url = shared_master.url + "/api/v1"
    gc_policy = {"save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 1}
    for method, path, kw in [
        ("get", f"/experiments/{MISSING}", {}),
        ("get", f"/experiments/{MISSING}/checkpoints", {}),
        ("get", f"/experiments/{MISSING}/preview_gc", {"params": gc_policy}),
        ("post", f"/experiments/{MISSING}/continue", {"json": {}}),
        ("patch", f"/experiments/{MISSING}", {"json": {"notes": "x"}}),
        ("get", f"/trials/{MISSING}", {}),
        ("get", f"/trials/{MISSING}/checkpoints", {}),
        ("post", f"/trials/{MISSING}/progress", {"json": {"progress": 0.5}}),
        ("post", f"/trials/{MISSING}/early_exit", {"json": {"reason": INVALID_HP}}),
        ("post", f"/trials/{MISSING}/searcher/completed_operation", {"json": {"op": ONE}}),
        ("post", f"/trials/{MISSING}/runner/metadata", {"json": {"state": "x"}}),
        ("get", "/checkpoints/no-such-uuid", {}),
        ("get", "/tasks/no.such.task/context_directory", {}),
        ("post", "/allocations/no.such.allocation/signals/ack_preemption", {"json": {}}),
        ("post", "/dev/allocations/no.such.allocation/exit", {"json": {"exitCode": 0}}),
    ]:
        r = admin.request(method, url + path, **kw)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["code"] == 5 and "not found" in r.json()["message"], r.text


@pytest.mark.e2e
def test_following_the_logs_of_a_trial_deleted_meanwhile_ends_the_stream(
    shared_master: MasterProcess,
) -> None:
    run = Run(shared_master)
    line = {"taskId": run.task_id, "allocationId": run.allocation_id, "log": "hello\n"}
    assert run.post("/api/v1/task/logs", json={"logs": [line]}).ok
    url = shared_master.url + f"/api/v1/experiments/{run.experiment_id}"
    assert run.admin.post(url + "/kill").ok
    assert run.exit(0) == "STATE_CANCELED"
    logs = f"{shared_master.url}/api/v1/trials/{run.trial_id}/logs"
    got: list[bytes] = []
    errors: list[BaseException] = []
    first = threading.Event()

    def follow() -> None:
        try:
            with run.admin.get(logs, params={"follow": "true"}, stream=True, timeout=30) as r:
                for chunk in r.iter_lines():
                    got.append(chunk)
                    first.set()
        except requests.RequestException as e:  # a stream cut short: the generator raised
            errors.append(e)
        finally:
            first.set()

    reader = threading.Thread(target=follow)
    reader.start()
    assert first.wait(30)
    assert run.admin.delete(url).ok  # within the stream's grace after the trial ended
    reader.join(30)
    assert not reader.is_alive() and not errors
    assert len(got) == 1 and b"hello" in got[0]
