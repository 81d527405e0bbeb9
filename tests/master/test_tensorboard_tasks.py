"""TensorBoards as tasks (issue #21 item 2): one TensorBoard over two experiments serves both
experiments' trials' scalars through the master's proxy."""

from __future__ import annotations

import pathlib
import stat
import time

import psutil
import pytest
import requests
from _kit.tasks import proxied, wait_state
from _kit.trial_cluster import Cluster, config

from determined.cli import _session, _tensorboard
from determined.tensorboard import EventWriter

pytestmark = pytest.mark.e2e
CLUSTER_CPU_SLOTS = 2


def test_tensorboard_over_two_experiments(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("tensorboard")
    exp_ids = []
    for i in range(2):
        cfg = config(tmp_path / f"out{i}")
        cfg["entrypoint"] = "true"
        cfg["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(tmp_path / "ckpt")}
        exp_ids.append(cluster.create(cfg))
    token = str(cluster.s.headers["Authorization"]).split()[1]
    sess = _session.client(cluster.url, token)
    deadline = time.monotonic() + 30
    while not all(cluster.get(f"/api/v1/experiments/{e}/trials")["trials"] for e in exp_ids):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    dirs = _tensorboard.trial_dirs(sess, exp_ids)
    for n, path in enumerate(sorted(dirs.values())):
        writer = EventWriter(path)
        for step in range(3):
            writer.add_scalar("loss", float(n * 10 + step), step)
        writer.close()
    r = cluster.s.post(cluster.url + "/api/v1/tensorboards", json={"experimentIds": exp_ids})
    assert r.status_code == 200, r.text
    tb = r.json()["tensorboard"]
    assert tb["experimentIds"] == exp_ids
    wait_state(cluster, "tensorboard", tb["id"], "STATE_RUNNING")
    # A run per trial, named by experiment and trial (TensorBoard adds "/." for files at the
    # top of a run's directory).
    runs: list[str] = []
    deadline = time.monotonic() + 60
    while sorted(r.removesuffix("/.") for r in runs) != sorted(dirs):
        assert time.monotonic() < deadline, runs
        runs = proxied(cluster, f"/proxy/{tb['id']}/data/runs").json()
        time.sleep(0.5)
    tags = proxied(cluster, f"/proxy/{tb['id']}/data/plugin/scalars/tags").json()
    assert set(tags) == set(runs) and all("loss" in t for t in tags.values())
    name = sorted(runs)[1]
    points = proxied(
        cluster, f"/proxy/{tb['id']}/data/plugin/scalars/scalars?run={name}&tag=loss"
    ).json()
    assert [p[1:] for p in points] == [[0, 10.0], [1, 11.0], [2, 12.0]]
    assert requests.get(f"{cluster.url}/proxy/{tb['id']}/data/runs").status_code == 401
    # Issue #35: TensorBoard listens on no TCP port anyone on the host could reach, only on a
    # unix socket in a directory of the master's user's (0700), which the proxy talks to.
    started = next(x["log"] for x in cluster.logs(tb["id"]) if "have started" in x["log"])
    pid = int(started.split("pid ")[1].split(",")[0])
    sock = pathlib.Path(started.split("'unix:")[1].split("'")[0])
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(sock.stat().st_mode) & 0o077 == 0
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    listening = [c for p in procs for c in p.net_connections("inet") if c.status == "LISTEN"]
    assert listening == [], listening
    cluster.post(f"/api/v1/tensorboards/{tb['id']}/kill")
    wait_state(cluster, "tensorboard", tb["id"], "STATE_TERMINATED")
    assert not sock.parent.exists()


def test_a_tensorboard_takes_its_experiments_image_and_pull_secrets(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """0.37's e2e test_tensorboard_inherit_image_pull_secrets and
    test_start_tensorboard_with_custom_image: an image given as one name is every
    accelerator's; a TensorBoard without one takes its experiment's, with its pull secrets."""
    cfg = config(tmp_path / "out")
    cfg["environment"] = {
        "image": "img:1",
        "pod_spec": {"spec": {"imagePullSecrets": [{"name": "ips"}]}},
    }
    exp_id = cluster.create(cfg, activate=False)
    r = cluster.s.post(cluster.url + "/api/v1/tensorboards", json={"experimentIds": [exp_id]})
    assert r.status_code == 200, r.text
    shown = cluster.get(f"/api/v1/tensorboards/{r.json()['tensorboard']['id']}")["config"]
    env = shown["environment"]
    assert env["image"] == {"cpu": "img:1", "cuda": "img:1", "rocm": "img:1"}
    assert env["pod_spec"]["spec"]["imagePullSecrets"] == [{"name": "ips"}]
    own = {"experimentIds": [exp_id], "config": {"environment": {"image": "mine:2"}}}
    r = cluster.s.post(cluster.url + "/api/v1/tensorboards", json=own)
    assert r.status_code == 200, r.text
    env = cluster.get(f"/api/v1/tensorboards/{r.json()['tensorboard']['id']}")["config"][
        "environment"
    ]
    assert env["image"] == {"cpu": "mine:2", "cuda": "mine:2", "rocm": "mine:2"}
    assert "pod_spec" not in env  # its own image: nothing inherited
    # An experiment without an image still passes its pull secrets on.
    del cfg["environment"]["image"]
    bare = cluster.create(cfg, activate=False)
    r = cluster.s.post(cluster.url + "/api/v1/tensorboards", json={"experimentIds": [bare]})
    assert r.status_code == 200, r.text
    env = cluster.get(f"/api/v1/tensorboards/{r.json()['tensorboard']['id']}")["config"][
        "environment"
    ]
    assert env["pod_spec"]["spec"]["imagePullSecrets"] == [{"name": "ips"}]
