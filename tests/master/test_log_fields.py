"""Log fields (issue #34 item 8): ``GET /api/v1/tasks/{id}/logs/fields`` and
``/api/v1/trials/{id}/logs/fields`` list the values a reader may filter a task's lines on, and
each of them, given back as a filter, finds lines; rank -1 stands for the lines without a rank.
Read with 0.37's own SDK, as its e2e test_logging does."""

from __future__ import annotations

import pathlib

import pytest
from _kit.master import MasterProcess, Run
from _kit.reference import Ref

pytestmark = pytest.mark.e2e

_READ = r"""
import json, sys
from determined.common import api
from determined.common.api import authentication, bindings

url, task_id, trial_id, follow = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
sess = authentication.login(url, "admin", "")
task = [f.to_json() for f in bindings.get_TaskLogsFields(sess, taskId=task_id, follow=follow)]
trial = [f.to_json() for f in bindings.get_TrialLogsFields(sess, trialId=trial_id, follow=follow)]
snake = {"agentIds": "agent_ids", "allocationIds": "allocation_ids", "containerIds":
         "container_ids", "rankIds": "rank_ids", "sources": "sources", "stdtypes": "stdtypes"}
found = {
    key: [len(list(api.task_logs(sess, task_id, **{snake[key]: [v]}))) for v in values]
    for key, values in task[-1].items()
}
found["rank-1"] = len(list(api.task_logs(sess, task_id, rank_ids=[-1])))
found["rank-2"] = len(list(api.task_logs(sess, task_id, rank_ids=[-2])))
found["tail"] = [log.log for log in api.task_logs(sess, task_id, tail=2)]
print(json.dumps({"task": task, "trial": trial, "found": found}))
"""


def test_fields_filters_and_follow_with_the_reference_sdk(
    shared_master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    run = Run(shared_master)
    base = {"taskId": run.task_id, "allocationId": run.allocation_id, "agentId": "local"}
    logs = [
        {**base, "log": "zero out\n", "rankId": 0, "stdtype": "stdout", "source": "task"},
        {**base, "log": "one err\n", "rankId": 1, "stdtype": "stderr", "source": "task"},
        {**base, "log": "no rank\n", "containerId": "c-1", "source": "master"},
    ]
    assert run.post("/api/v1/task/logs", json={"logs": logs}).status_code == 200
    ref = Ref(shared_master, tmp_path / "ref")

    got = ref.python(_READ, run.task_id, str(run.trial_id), "0")
    assert got["task"] == [
        {
            "agentIds": ["local"],
            "allocationIds": [run.allocation_id],
            "containerIds": ["c-1"],
            "rankIds": [0, 1],
            "sources": ["master", "task"],
            "stdtypes": ["stderr", "stdout"],
        }
    ]
    assert got["trial"] == [{k: v for k, v in got["task"][0].items() if k != "allocationIds"}]
    found = got["found"]
    assert found["rankIds"] == [1, 1] and found["sources"] == [1, 2]
    assert found["stdtypes"] == [1, 1] and found["agentIds"] == [3]
    assert found["containerIds"] == [1] and found["allocationIds"] == [3]
    assert (found["rank-1"], found["rank-2"]) == (1, 0)
    assert found["tail"] == ["one err\n", "no rank\n"]

    # follow: the fields, then the stream ends once the trial has ended and is quiet.
    run.exit(0)
    followed = ref.python(_READ, run.task_id, str(run.trial_id), "1")
    assert followed["task"][-1] == got["task"][0] and followed["trial"] == got["trial"]


def test_unknown_task_or_trial(shared_master: MasterProcess) -> None:
    s = shared_master.session()
    assert s.get(shared_master.url + "/api/v1/tasks/nope/logs/fields").status_code == 404
    assert s.get(shared_master.url + "/api/v1/trials/99999/logs/fields").status_code == 404
