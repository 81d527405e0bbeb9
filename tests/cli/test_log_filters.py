"""0.37's log filters (issue #15 item 5): ``det t|e|task logs --stdtype/--level/--rank-id/
--timestamp-*/...`` over the filter parameters of ``/trials/{id}/logs`` and ``/tasks/{id}/logs``,
with our CLI and 0.37's."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

SCRIPT = """
import sys
print("to stdout", flush=True)
print("ERROR: to stderr", file=sys.stderr, flush=True)
print("[rank=1] from rank one", flush=True)
"""
CONFIG = {
    "name": "log-filters",
    "entrypoint": "python3 train.py",
    "max_restarts": 0,
    "searcher": {"name": "single", "metric": "loss", "max_length": 1},
}


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict]]:
    with MasterProcess(tmp_path_factory.mktemp("filters") / "master", cpu_slots=1) as m:
        cluster = Cluster(m)
        exp_id = cluster.create(CONFIG, {"train.py": SCRIPT})
        cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=60)
        [trial] = cluster.trials(exp_id)
        cluster.wait_log(trial["taskId"], "from rank one")
        yield cluster, trial


def _texts(out: str) -> list[str]:
    return [json.loads(line)["log"].strip() for line in out.splitlines() if line.startswith("{")]


def test_filters_on_trial_and_task_logs(
    ended: tuple[Cluster, dict], tmp_path: pathlib.Path
) -> None:
    cluster, trial = ended
    det = Det(tmp_path / "home", cluster.url)
    tid = str(trial["id"])
    everything = _texts(det.ok("t", "logs", tid, "--json"))
    assert {"to stdout", "to stderr", "from rank one"} <= set(everything)
    stderr = _texts(det.ok("t", "logs", tid, "--json", "--stdtype", "stderr"))
    assert "to stderr" in stderr and "to stdout" not in stderr and "from rank one" not in stderr
    assert _texts(det.ok("t", "logs", tid, "--json", "--level", "ERROR")) == ["to stderr"]
    assert _texts(det.ok("t", "logs", tid, "--json", "--rank-id", "1")) == ["from rank one"]
    later = ["--timestamp-after", "2999-01-01T00:00:00Z"]
    assert _texts(det.ok("t", "logs", tid, "--json", *later)) == []
    earlier = ["--timestamp-before", "2000-01-01T00:00:00Z"]
    assert _texts(det.ok("e", "logs", str(trial["experimentId"]), "--json", *earlier)) == []
    task = det.ok("task", "logs", trial["taskId"], "--json", "--level", "ERROR")
    assert _texts(task) == ["to stderr"]
    bad = cluster.s.get(cluster.url + f"/api/v1/trials/{tid}/logs?timestampAfter=yesterday")
    assert bad.status_code == 400 and "RFC 3339" in bad.text

    if (REF / "bin" / "det").exists():
        ref = Ref(cluster.master, tmp_path / "ref")
        out = ref.det("t", "logs", tid, "--stdtype", "stderr")
        assert "to stderr" in out and "to stdout" not in out
        assert "to stderr" in ref.det("t", "logs", tid, "--level", "ERROR")
