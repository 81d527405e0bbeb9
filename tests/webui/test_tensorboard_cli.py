"""``det tensorboard start --local``: a real TensorBoard over a real experiment's synced event
files."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import requests
from _kit.master import free_port
from _kit.webui import TESTS, Cluster

from determined.cli import _session, _tensorboard

pytestmark = pytest.mark.e2e


def _det_env(cluster: Cluster, home: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(TESTS.parent)
    env["DET_HOME"] = str(home)
    env["DET_MASTER"] = cluster.url
    return env


def test_trial_dirs_are_where_trials_synced_their_event_files(cluster: Cluster) -> None:
    token = str(cluster.s.headers["Authorization"]).split()[1]
    sess = _session.client(cluster.url, token)
    dirs = _tensorboard.trial_dirs(sess, [cluster.done])
    trials = cluster.trials(cluster.done)
    assert set(dirs) == {f"trial_{t['id']}" for t in trials}
    for path in dirs.values():
        events = list(path.rglob("events.out.tfevents.*"))
        assert events, f"no event files under {path}"
    both = _tensorboard.trial_dirs(sess, [cluster.done, cluster.done], [trials[0]["id"]])
    assert set(both) == {f"exp_{cluster.done}_trial_{trials[0]['id']}"}


def _get(url: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = requests.get(url, timeout=2)
            if r.ok:
                return r.json()
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer in {timeout}s")
        time.sleep(0.3)


def test_det_tensorboard_start_serves_each_trials_scalars(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    pytest.importorskip("tensorboard")
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "determined.cli",
        "tensorboard",
        "start",
        "--local",
        str(cluster.done),
    ]
    cmd += ["--port", str(port)]
    proc = subprocess.Popen(
        cmd,
        env=_det_env(cluster, tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        trials = cluster.trials(cluster.done)
        want = {f"trial_{t['id']}" for t in trials}
        deadline = time.monotonic() + 60
        while True:
            runs = _get(url + "/data/runs")
            if want <= {r.split("/")[0] for r in runs}:
                break
            assert time.monotonic() < deadline, f"runs {runs}, want {want}"
            time.sleep(0.5)
        tags = _get(url + "/data/plugin/scalars/tags")
        with_loss = {run.split("/")[0] for run, s in tags.items() if any("loss" in t for t in s)}
        assert want <= with_loss, tags
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    assert b"TensorBoard over 2 trial(s)" in out
