"""Bounded inputs (issue #16 item 10) against a real master: YAML aliases and nesting
(determined/master/experiment/_config.py), request body sizes and JSON depth
(determined/master/_app.py), hyperparameter and grid sizes
(determined/master/searcher/_hparams.py), unknown storage ids, barriers of ended allocations
(determined/master/_signals.py). Each is a clear 4xx, answered at once, never a 500."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
import requests
from _kit.master import SINGLE_CONFIG, MasterProcess, Run

pytestmark = pytest.mark.e2e

LAUGHS = """entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 1}
hyperparameters:
  a: &a [x, x, x, x, x, x, x, x, x, x]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
  g: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
"""


def _create(master: MasterProcess, config: str) -> requests.Response:
    return master.session().post(master.url + "/api/v1/experiments", json={"config": config})


def _message(r: requests.Response) -> str:
    return str(r.json()["message"])


def test_yaml_aliases_and_nesting_are_bounded(shared_master: MasterProcess) -> None:
    assert len(LAUGHS) < 500  # expands to 10^7 values
    started = time.monotonic()
    r = _create(shared_master, LAUGHS)
    assert r.status_code == 400 and "expands to more than" in _message(r), r.text
    assert time.monotonic() - started < 5
    deep = SINGLE_CONFIG + "  deep: " + "[" * 1000 + "]" * 1000 + "\n"
    r = _create(shared_master, deep)
    assert r.status_code == 400 and "nests deeper than" in _message(r), r.text
    # Through continue's override as well.
    body = {"id": 1, "overrideConfig": "a: " + "[" * 1000 + "]" * 1000}
    r = shared_master.session().post(shared_master.url + "/api/v1/experiments/continue", json=body)
    assert r.status_code == 400 and "nests deeper than" in _message(r), r.text


def test_hyperparameter_and_grid_sizes_are_bounded(shared_master: MasterProcess) -> None:
    many = SINGLE_CONFIG + "".join(f"  k{i}: {i}\n" for i in range(1001))
    r = _create(shared_master, many)
    assert r.status_code == 400 and "the limit is 1000" in _message(r), r.text
    grid = """entrypoint: python3 train.py
searcher: {name: grid, metric: loss, max_length: 1}
hyperparameters:
  a: {type: double, minval: 0, maxval: 1, count: 1000}
  b: {type: double, minval: 0, maxval: 1, count: 1000000000}
"""
    started = time.monotonic()
    r = _create(shared_master, grid)
    assert r.status_code == 400 and "the grid has 1000000000000 points" in _message(r), r.text
    assert "b: 1000000000" in _message(r)
    assert time.monotonic() - started < 5


def test_a_config_too_large_for_the_trials_environment(shared_master: MasterProcess) -> None:
    big = SINGLE_CONFIG + "  blob: " + "x" * 130_000 + "\n"
    r = _create(shared_master, big)
    assert r.status_code == 400 and "DET_EXPERIMENT_CONFIG" in _message(r), r.text


def test_request_bodies_are_bounded(shared_master: MasterProcess) -> None:
    url = shared_master.url + "/api/v1/auth/login"
    r = requests.post(url, data=b" " * (16 * 1024 * 1024 + 1))
    assert r.status_code == 413 and "larger than" in _message(r), r.text

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(17):
            yield b" " * (1024 * 1024)

    r = requests.post(url, data=chunks())
    assert r.status_code == 413, r.text
    r = requests.post(url, json={"username": "admin", "password": ""})
    assert r.status_code == 200, r.text


def test_deep_json_and_unknown_storage_ids_are_400(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    # Written by hand: json.dumps itself cannot nest this deep. At 900 levels the body parses
    # and later recursion fails (it was a 500); at 5000 the parser itself refuses.
    for depth in (900, 5000):
        deep = '{"a": ' * depth + "1" + "}" * depth
        metrics = {"trialId": run.trial_id, "trialRunId": run.run_id, "stepsCompleted": depth}
        shallow = json.dumps({"group": "training", "metrics": {**metrics, "metrics": {}}})
        body = shallow.replace('"metrics": {}', '"metrics": {"avgMetrics": {"loss": ' + deep + "}}")
        r = run.post(f"/api/v1/trials/{run.trial_id}/metrics", data=body)
        assert r.status_code == 400, (depth, r.text)
        assert "nested too deeply" in _message(r) or depth == 5000, r.text
    body = {
        "uuid": "5f0c5e4e-0000-4000-8000-000000000001",
        "taskId": run.task_id,
        "allocationId": run.allocation_id,
        "resources": {},
        "metadata": {"steps_completed": 1},
        "storageId": 987654,
    }
    r = run.post("/api/v1/checkpoints", json=body)
    assert r.status_code == 400 and "storageId 987654" in _message(r), r.text


def test_a_barrier_ends_with_its_allocation(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    answers: list[requests.Response] = []
    path = f"/api/v1/allocations/{run.allocation_id}/all_gather"
    body = {"requestUuid": "r1", "numPeers": 2, "data": {"rank": 0}}
    waiter = threading.Thread(target=lambda: answers.append(run.post(path, json=body)))
    waiter.start()
    time.sleep(0.5)  # it waits for a second peer that will never come
    assert not answers
    run.exit(1)
    waiter.join(10)
    assert answers and answers[0].status_code == 400, answers
    assert "ended before every participant arrived" in _message(answers[0])
