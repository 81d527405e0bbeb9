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
    # Done but not yet recorded as ended, it shows as QUEUED: not printed (issue 38 item 5).
    assert "QUEUED, progress 100.0%" not in r.stderr
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

    # The trial's last line, then the master's two end-of-run lines (0.37's and ours).
    tail = cluster.ok("e", "logs", str(exp_id), "--tail", "3").splitlines()
    assert len(tail) == 3 and tail[0].endswith(" done training"), tail
    assert "resources exited successfully with a zero exit code" in tail[1], tail
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
    assert failed[0].endswith("(at model_def.py:1 in <module>)"), failed[0]
    # torchrun's own traceback and failure table are cut to one line below the cause
    assert "ChildFailedError" not in r.stdout and "Root Cause" not in r.stdout, r.stdout
    assert "torch_distributed: worker rank 0 exited with code 1" in r.stdout
    logs = cluster("t", "logs", str(trial_id))
    assert logs.stderr.splitlines()[0].startswith(f"Trial {trial_id} failed: {cause}")


BAD_TRIAL = """\
import torch
from determined import pytorch


class MyTrial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.model = context.wrap_model(torch.nn.Linear(2, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

    def build_training_data_loader(self):
        data = torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
        return pytorch.DataLoader(data, batch_size=2)

    def build_validation_data_loader(self):
        return self.build_training_data_loader()

    def train_batch(self, batch, epoch_idx, batch_idx):
        return {"loss": self.lookup(batch)}

    def lookup(self, batch):
        return batch["missing"]

    def evaluate_batch(self, batch):
        return {"loss": 0.0}
"""


@pytest.mark.parametrize(
    ("entrypoint", "files", "cause"),
    [
        (
            "model_def:MyTrial",
            {"model_def.py": BAD_TRIAL},
            "TypeError: list indices must be integers or slices, not str "
            "(at model_def.py:21 in lookup)",
        ),
        # A script that fails before core.init: the first traceback's exception and frame.
        (
            "python3 train.py",
            {"train.py": "print('start')\nlr = {}['lr']\n"},
            "KeyError: 'lr' (at ",
        ),
    ],
    ids=["trial-code", "script"],
)
def test_an_exception_in_user_code_is_named_with_its_line(
    cluster: Det, tmp_path: pathlib.Path, entrypoint: str, files: dict[str, str], cause: str
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    for name, text in files.items():
        (model / name).write_text(text)
    config = tmp_path / "config.yaml"
    text = CONFIG.format(name="broken", entrypoint=entrypoint) + "max_restarts: 0\n"
    config.write_text(text.replace("max_length: 10", "max_length: {batches: 4}"))
    r = cluster("e", "create", str(config), str(model), "-f")
    failed = [line for line in r.stderr.splitlines() if " failed: " in line]
    assert len(failed) == 1 and cause in failed[0], r.stdout + r.stderr
    if entrypoint == "python3 train.py":
        assert failed[0].endswith("train.py:2 in <module>)"), failed[0]
