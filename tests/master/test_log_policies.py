"""``log_policies`` (issue #20 item 6, issue #34 item 5): a trial's log line matching a
``cancel_retries`` pattern makes its failure final; ``exclude_node`` keeps it off the node, so
on this one-node master it waits QUEUED (as on 0.37's agents) until killed; a bad pattern is
refused at create time. Restarts are shown as 0.37 does: at most ``max_restarts``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

FAILING = """\
import json, sys
print("FAILING-RUN", flush=True)
print('{"log_policies": "the config echo never matches: CUDA out of memory"}', flush=True)
print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
sys.exit(1)
"""


def _config(*policies: dict[str, Any], max_restarts: int = 3) -> dict[str, Any]:
    return {
        "name": "log-policies",
        "entrypoint": "python3 train.py",
        "max_restarts": max_restarts,
        "searcher": {"name": "single", "metric": "loss", "max_length": 1},
        "log_policies": list(policies),
    }


def _run(cluster: Cluster, cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    exp_id = cluster.create(cfg, {"train.py": FAILING})
    cluster.wait_experiment(exp_id, "STATE_ERROR", timeout=90)
    [trial] = cluster.trials(exp_id)
    return trial, [line["log"].rstrip("\n") for line in cluster.logs(trial["taskId"])]


def test_cancel_retries_makes_the_first_failure_final(cluster: Cluster) -> None:
    policy = {"pattern": "CUDA out of memory", "action": {"type": "cancel_retries"}}
    trial, logs = _run(cluster, _config(policy))
    assert trial["restarts"] == 0  # no second run
    assert "trial failed and matched logs to a don't retry policy" in logs
    line = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert f'(log {json.dumps(line)} matched regex "CUDA out of memory")' in logs
    assert sum("matched regex" in entry for entry in logs) == 1  # the echo line did not count


def test_without_a_matching_policy_failures_are_retried(cluster: Cluster) -> None:
    policy = {"pattern": "segmentation fault", "action": {"type": "cancel_retries"}}
    trial, logs = _run(cluster, _config(policy, max_restarts=1))
    # max_restarts 1: two runs, then ERROR; 0.37 shows LEAST(restarts, max_restarts).
    assert trial["restarts"] == 1
    assert sum("FAILING-RUN" in entry for entry in logs) == 2
    assert not any("don't retry" in entry for entry in logs)


def test_exclude_node_leaves_the_trial_queued_on_a_one_node_master(cluster: Cluster) -> None:
    policy = {"pattern": "out of memory", "action": {"type": "exclude_node"}}
    exp_id = cluster.create(_config(policy), {"train.py": FAILING})
    [trial] = cluster.trials(exp_id)
    deadline = time.monotonic() + 60
    while "therefore will not schedule on" not in "".join(
        line["log"] for line in cluster.logs(trial["taskId"])
    ):
        assert time.monotonic() < deadline, "no exclude_node note in the trial's log"
        time.sleep(0.3)
    # It waits for a node it may use (there is none here): QUEUED, one restart counted.
    time.sleep(3)
    assert cluster.experiment(exp_id)["state"] == "STATE_QUEUED"
    [trial] = cluster.trials(exp_id)
    assert (trial["state"], trial["restarts"]) == ("STATE_QUEUED", 1)
    logs = [line["log"].rstrip("\n") for line in cluster.logs(trial["taskId"])]
    note = [entry for entry in logs if "therefore will not schedule on" in entry]
    assert len(note) == 1 and note[0].endswith("therefore will not schedule on local"), logs
    assert sum("FAILING-RUN" in entry for entry in logs) == 1  # not started again
    assert cluster.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_CANCELED")


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"pattern": "(", "action": {"type": "cancel_retries"}}, "not a valid regular expression"),
        ({"pattern": "x", "action": {"type": "retry_later"}}, "cancel_retries"),
        ({"pattern": "x"}, "action"),
    ],
)
def test_bad_policies_are_refused_at_create(
    cluster: Cluster, policy: dict[str, Any], message: str
) -> None:
    r = cluster.s.post(
        cluster.url + "/api/v1/experiments", json={"config": yaml.safe_dump(_config(policy))}
    )
    assert r.status_code == 400 and message in r.json()["message"], r.text
