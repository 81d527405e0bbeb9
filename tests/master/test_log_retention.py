"""Log retention (issue #15 item 5): the master's ``retention_policy`` drops ended trials' logs
on its schedule; ``det t|e set log-retention`` (0.37's ``PUT .../retain_logs``) sets a trial's
own days or keeps its logs forever, with our CLI and 0.37's."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest
import requests
from _kit.cli import Det
from _kit.master import MasterProcess, login
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

CHATTY = "print('a line to keep or drop', flush=True)\n"
CONFIG = {
    "name": "retention",
    "entrypoint": "python3 train.py",
    "max_restarts": 0,
    "searcher": {"name": "single", "metric": "loss", "max_length": 1},
}
ENDED = ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED")


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    """Ended trials' logs are due at once (0 days), swept every second."""
    args = ["--log-retention-days", "0", "--log-retention-schedule", "1s"]
    with MasterProcess(tmp_path / "master", cpu_slots=1, args=args) as m:
        yield Cluster(m)


def _ended_trial(cluster: Cluster, exp_id: int) -> dict:
    cluster.wait_experiment(exp_id, *ENDED, timeout=60)
    [trial] = cluster.trials(exp_id)
    return trial


def _wait_no_logs(cluster: Cluster, task_id: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while cluster.logs(task_id):
        assert time.monotonic() < deadline, "the logs were not dropped"
        time.sleep(0.2)


def test_policy_forever_and_per_trial_days(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    # The master's 0 days: an ended trial's logs go at the next sweep.
    dropped = _ended_trial(cluster, cluster.create(CONFIG, {"train.py": CHATTY}))
    _wait_no_logs(cluster, dropped["taskId"])

    # --forever on the experiment before its trial runs: they stay past several sweeps.
    kept_exp = cluster.create(CONFIG, {"train.py": CHATTY}, activate=False)
    det = Det(tmp_path / "home", cluster.url)
    det.ok("user", "login", "admin", input="\n")
    said = det.ok("e", "set", "log-retention", str(kept_exp), "--forever")
    assert "logs kept forever" in said
    assert cluster.post(f"/api/v1/experiments/{kept_exp}/activate").ok
    kept = _ended_trial(cluster, kept_exp)
    assert kept["logRetentionDays"] == -1
    time.sleep(2.5)
    assert any("a line to keep" in line["log"] for line in cluster.logs(kept["taskId"]))

    # Bad values are refused; only the owner or an admin may change it.
    for flags in (["--days", "40000"], []):
        bad = det("t", "set", "log-retention", str(kept["id"]), *flags)
        assert bad.returncode == 1, bad
    route = cluster.url + f"/api/v1/trials/{kept['id']}/retain_logs"
    assert cluster.s.put(route, json={"numDays": -2}).status_code == 400
    user = cluster.master.session(login(cluster.url, "determined"))
    assert user.put(route, json={"numDays": 0}).status_code == 403
    assert requests.put(route, json={"numDays": 0}, timeout=10).status_code == 401

    if (REF / "bin" / "det").exists():
        ref = Ref(cluster.master, tmp_path / "ref")
        ref.env.update(DET_USER="admin")
        ref.det("t", "set", "log-retention", str(kept["id"]), "--days", "3")
        assert cluster.get(f"/api/v1/trials/{kept['id']}")["trial"]["logRetentionDays"] == 3
        assert cluster.logs(kept["taskId"])  # 3 days have not passed

    # The trial's own 0 days: dropped at once.
    det.ok("t", "set", "log-retention", str(kept["id"]), "--days", "0")
    _wait_no_logs(cluster, kept["taskId"], timeout=3)
