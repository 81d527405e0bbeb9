"""End to end with real trial processes: a master from ``det master up --cpu-slots 1``,
experiments created with ``det e create``, followed, listed, killed; checkpoints downloaded."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
from collections.abc import Iterator

import psutil
import pytest
from _kit.cli import Det
from _kit.master import free_port

pytestmark = pytest.mark.e2e

TRAIN = """\
from determined import core as det_core

with det_core.init() as core:
    for op in core.searcher.operations():
        with core.checkpoint.store_path({"steps_completed": op.length}) as (path, uuid):
            (path / "w.txt").write_text("weights")
        core.train.report_validation_metrics(steps_completed=op.length, metrics={"loss": 0.5})
        op.report_completed(0.5)
print("done training")
"""

CONFIG = """\
name: {name}
entrypoint: {entrypoint}
searcher:
  name: single
  metric: loss
  max_length: 10
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Det]:
    home = tmp_path_factory.mktemp("cluster") / "home"
    det = Det(home)  # found through the data dir: no -m, no DET_MASTER
    det.ok("master", "up", "--port", str(free_port()), "--cpu-slots", "1")
    pid = int((home / "master.pid").read_text())
    yield det
    det("master", "down")
    if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        os.kill(pid, signal.SIGKILL)


def _experiment(tmp_path: pathlib.Path, entrypoint: str, name: str = "e2e") -> list[str]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "train.py").write_text(TRAIN)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(name=name, entrypoint=entrypoint))
    return [str(config), str(model)]


def test_follow_checkpoints_and_logs(cluster: Det, tmp_path: pathlib.Path) -> None:
    r = cluster("e", "create", *_experiment(tmp_path, "python3 train.py"), "-f")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    exp_id = int(re.fullmatch(r"Created experiment (\d+)", lines[0]).group(1))  # type: ignore[union-attr]
    assert lines[1] == "Waiting for first trial to begin..."
    trial_id = int(re.fullmatch(r"Following first trial with ID (\d+)", lines[2]).group(1))  # type: ignore[union-attr]
    assert any(line.endswith(" done training") for line in lines)
    assert lines[-1] == (
        f"Trial log stream ended. To reopen log stream, run: det trial logs -f {trial_id}"
    )
    assert f"Experiment {exp_id}: COMPLETED, progress 100.0%" in r.stderr
    # Each validation as it arrives (here one, at the end: shown by the final poll at least).
    assert f"Trial {trial_id} validation after 10 batches: loss=0.5" in r.stderr.splitlines()

    ckpts = json.loads(cluster.ok("e", "lc", str(exp_id), "--json"))
    assert len(ckpts) == 1
    uuid = ckpts[0]["uuid"]
    table = cluster.ok("e", "list-checkpoints", str(exp_id))
    row = [c.strip() for c in table.splitlines()[2].split("|")]
    assert row[:5] == [str(trial_id), "10", "COMPLETED", "0.5", uuid]

    described = cluster.ok("checkpoint", "describe", uuid)
    assert uuid in described and "Steps Completed" in described
    out = tmp_path / "dl"
    path = cluster.ok("c", "download", uuid, "-o", str(out), "-q").strip()
    assert pathlib.Path(path) == out
    assert (out / "w.txt").read_text() == "weights"

    tail = cluster.ok("e", "logs", str(exp_id), "--tail", "2").splitlines()
    assert len(tail) == 2 and tail[0].endswith(" done training")
    head = cluster.ok("t", "logs", str(trial_id), "--head", "1").splitlines()
    assert len(head) == 1 and "have started" in head[0]
    followed = cluster("t", "logs", str(trial_id), "-f")
    assert followed.returncode == 0
    assert any(line.endswith(" done training") for line in followed.stdout.splitlines())
    assert f"Trial {trial_id} validation after 10 batches: loss=0.5" in followed.stderr


def test_kill_experiment_and_wait(cluster: Det, tmp_path: pathlib.Path) -> None:
    entry = "python3 -c 'import time; print(\"sleeping\", flush=True); time.sleep(120)'"
    args = _experiment(tmp_path, json.dumps(entry), name="sleeper")
    exp_id = int(cluster.ok("e", "create", *args).split()[-1])
    trial_id = json.loads(cluster.ok("e", "lt", str(exp_id), "--json"))[0]["id"]
    assert cluster.ok("e", "kill", str(exp_id)) == f"Killed experiment {exp_id}\n"
    r = cluster("e", "wait", str(exp_id), "--polling-interval", "0.2")
    assert r.returncode == 1  # ended, but not COMPLETED
    assert r.stdout.strip() == f"Experiment {exp_id} ended: CANCELED"
    trial = json.loads(cluster.ok("t", "describe", str(trial_id), "--json"))["trial"]
    assert trial["state"] == "STATE_CANCELED"
    assert cluster.ok("t", "kill", str(trial_id)) == f"Killed trial {trial_id}\n"
    stray = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if 'print("sleeping"' in " ".join(p.info["cmdline"] or [])
    ]
    assert stray == []


def test_a_failing_import_is_named_as_the_cause(cluster: Det, tmp_path: pathlib.Path) -> None:
    """The one-line cause (with its fix) comes first for `det t logs` and last for `-f`."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_def.py").write_text("import no_such_package_zz\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        CONFIG.format(name="broken", entrypoint="model_def:MyTrial") + "max_restarts: 0\n"
    )
    cause = (
        "cannot load the trial class: entrypoint 'model_def:MyTrial': No module named "
        "'no_such_package_zz'; install 'no_such_package_zz' in the trial's environment"
    )
    r = cluster("e", "create", str(config), str(model), "-f")
    trial_id = int(re.search(r"Following first trial with ID (\d+)", r.stdout).group(1))  # type: ignore[union-attr]
    failed = [line for line in r.stderr.splitlines() if line.startswith(f"Trial {trial_id} failed")]
    assert len(failed) == 1 and cause in failed[0], r.stderr
    logs = cluster("t", "logs", str(trial_id))
    assert logs.stderr.splitlines()[0].startswith(f"Trial {trial_id} failed: {cause}")
