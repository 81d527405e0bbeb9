"""Two 2-slot trials at once on one machine, each building its ``DistributedContext`` directly
(not through ``core.init`` or a factory): the master exports each run's ZMQ ports with its
unique port offset added, so they never collide on 12360 (docs/master.md, "The local resource
manager"; docs/core/distributed.md)."""

from __future__ import annotations

import pathlib
import re

import pytest
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

CLUSTER_CPU_SLOTS = 4  # the conftest cluster fixture's master: room for both trials at once

PORTS_PY = r"""
import os, pathlib, sys, time
import determined as det
from determined import core

info = det.get_cluster_info()
shared = pathlib.Path(info.trial.hparams["shared"])
env = {n: int(os.environ[n]) for n in (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"
)}
dist = core.DistributedContext(
    rank=env["RANK"], size=env["WORLD_SIZE"],
    local_rank=env["LOCAL_RANK"], local_size=env["LOCAL_WORLD_SIZE"],
    cross_rank=env["GROUP_RANK"], cross_size=env["GROUP_WORLD_SIZE"],
    timeout=60,
)
ranks = dist.allgather(dist.get_rank())
if dist.get_rank() == 0:
    print(f"bound {dist._pub_port} {dist._pull_port} ranks {ranks}", flush=True)
    (shared / str(info.trial.trial_id)).touch()
    deadline = time.monotonic() + 120
    while len(list(shared.iterdir())) < 2:  # both trials hold their ports at once
        if time.monotonic() > deadline:
            sys.exit("the other trial never came up")
        time.sleep(0.2)
dist.broadcast(None)  # the other rank waits here for the chief
dist.close()
"""


def _config(shared: pathlib.Path, name: str) -> dict:
    return {
        "name": name,
        "entrypoint": "python3 -m determined.launch.torch_distributed python3 ports.py",
        "resources": {"slots_per_trial": 2},
        "searcher": {"name": "single", "metric": "loss", "max_length": 1},
        "hyperparameters": {"shared": str(shared)},
        "max_restarts": 0,
    }


def test_two_distributed_trials_on_one_host_use_different_zmq_ports(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    ids = [cluster.create(_config(shared, f"ports-{i}"), {"ports.py": PORTS_PY}) for i in (1, 2)]
    bound = []
    for exp_id in ids:
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=180)
        [trial] = cluster.trials(exp_id)
        text = "".join(e["log"] for e in cluster.logs(trial["taskId"]))
        assert exp["state"] == "STATE_COMPLETED", text[-3000:]
        match = re.search(r"bound (\d+) (\d+) ranks \[0, 1\]", text)
        assert match, text[-3000:]
        bound.append((int(match[1]), int(match[2])))
    assert len(set(bound)) == 2, bound
    for pub, pull in bound:  # 12360/12376 plus a multiple of the offset step
        assert pull - pub == 16 and (pub - 12360) % 32 == 0
