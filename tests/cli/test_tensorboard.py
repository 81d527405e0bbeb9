"""``det tensorboard start --local`` over an experiment kept in S3 (moto's server on
127.0.0.1): a real master runs a real trial that reports metrics in TensorBoard AUTO mode and
syncs its event files to the bucket; ``det`` downloads them and serves them with a real TensorBoard.

(The directory-storage case is tests/webui/test_tensorboard_cli.py.)
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from _kit.master import REPO, MasterProcess, free_port
from _kit.trial_cluster import Cluster, config

pytestmark = pytest.mark.e2e

pytest.importorskip("moto")
pytest.importorskip("tensorboard")

KEYS = {"access_key": "testing", "secret_key": "testing"}
REGION = "AWS_DEFAULT_REGION=us-east-1"


@pytest.fixture(scope="module")
def s3_storage() -> Iterator[dict[str, Any]]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = "tb-" + uuid.uuid4().hex[:12]
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=bucket)
    yield {"type": "s3", "bucket": bucket, "endpoint_url": endpoint, "prefix": "p", **KEYS}
    server.stop()


@pytest.fixture(scope="module")
def s3_experiment(
    tmp_path_factory: pytest.TempPathFactory, s3_storage: dict[str, Any]
) -> Iterator[tuple[MasterProcess, int, int]]:
    """(master, experiment id, trial id) of a COMPLETED experiment that kept its files in S3."""
    root = tmp_path_factory.mktemp("tb")
    master = MasterProcess(root / "master", cpu_slots=1)
    master.start()
    cluster = Cluster(master)
    cfg = config(root / "out", max_length=4)
    cfg["checkpoint_storage"] = s3_storage
    cfg["environment"] = {"environment_variables": [REGION]}
    exp_id = cluster.create(cfg)
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    trial_id = int(cluster.trials(exp_id)[0]["id"])
    assert exp["state"] == "STATE_COMPLETED", (master.log.read_text()[-3000:], exp)
    yield master, exp_id, trial_id
    master.stop()


def _get(url: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = requests.get(url, timeout=2)
            if r.ok:
                return r.json()
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer in {timeout}s"
        time.sleep(0.3)


def test_tensorboard_start_downloads_s3_event_files_and_serves_them(
    s3_experiment: tuple[MasterProcess, int, int], tmp_path: pathlib.Path
) -> None:
    master, exp_id, trial_id = s3_experiment
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(PYTHONPATH=str(REPO), DET_HOME=str(tmp_path / "home"), DET_MASTER=master.url)
    env["AWS_DEFAULT_REGION"] = "us-east-1"
    cmd = [sys.executable, "-m", "determined.cli", "tensorboard", "start", "--local", str(exp_id)]
    cmd += ["--port", str(port)]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    run = f"trial_{trial_id}"
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while run not in {r.split("/")[0] for r in _get(url + "/data/runs")}:
            assert proc.poll() is None, proc.communicate()[0].decode()
            assert time.monotonic() < deadline, _get(url + "/data/runs")
            time.sleep(0.5)
        tags = _get(url + "/data/plugin/scalars/tags")
        keys = [r for r, t in tags.items() if r.split("/")[0] == run and "Determined/loss" in t]
        assert keys, tags
        query = urllib.parse.urlencode({"run": keys[0], "tag": "Determined/loss"})
        series = _get(f"{url}/data/plugin/scalars/scalars?{query}", timeout=10)
        assert [int(p[1]) for p in series] == [1, 2, 3, 4], series  # the steps reported
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    text = out.decode()
    assert "Downloaded " in text and "TensorBoard file(s) from storage" in text, text
    assert f"TensorBoard over 1 trial(s) at http://127.0.0.1:{port}/" in text, text
    tmp = text.split("storage into ")[1].split()[0]
    assert not pathlib.Path(tmp).exists()  # the downloaded copies go away with det


def test_trial_dirs_refuses_cloud_storage_without_a_mirror(
    s3_experiment: tuple[MasterProcess, int, int],
) -> None:
    from determined.cli import _render, _session, _tensorboard

    master, exp_id, _ = s3_experiment
    sess = _session.client(master.url, str(master.session().headers["Authorization"]).split()[1])
    with pytest.raises(_render.CliError, match="'s3' storage"):
        _tensorboard.trial_dirs(sess, [exp_id])
