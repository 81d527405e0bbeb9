"""determined/master/api/_logs.py: an unfiltered tail (or newest-first page) of a trial's logs
reads only the newest lines from the store; it answers what reading every line and slicing
gives (the filtered path, which still reads them all)."""

from __future__ import annotations

import json

import pytest
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e


def _lines(run: Run, **params: object) -> list[str]:
    r = run.admin.get(run.master.url + f"/api/v1/trials/{run.trial_id}/logs", params=params)
    assert r.status_code == 200, r.text
    return [json.loads(line)["result"]["log"] for line in r.text.splitlines() if line]


def test_tail_and_newest_first_pages(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    logs = [{"taskId": run.task_id, "log": f"line {i}\n"} for i in range(30)]
    assert run.post("/api/v1/task/logs", json={"logs": logs}).status_code == 200
    every = [f"line {i}\n" for i in range(30)]
    assert _lines(run) == every
    # A filter that keeps every line takes the path that reads all of them: same answers.
    everything = {"searchText": "line"}
    for params in (
        {"tail": 5},
        {"tail": 50},
        {"limit": 3, "orderBy": "ORDER_BY_DESC"},
        {"limit": 3},
        {"head": 4},
        {"tail": 5, "orderBy": "ORDER_BY_DESC"},
    ):
        fast = _lines(run, **params)
        assert fast == _lines(run, **params, **everything), params
    assert _lines(run, tail=5) == every[-5:]
    assert _lines(run, limit=3, orderBy="ORDER_BY_DESC") == every[::-1][:3]
    assert _lines(run, tail=5, orderBy="ORDER_BY_DESC") == every[-5:][::-1]
