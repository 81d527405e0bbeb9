"""Experiments run by a real master's local resource manager, for the lifecycle tests.

``TRAIN_PY`` is a small Core API trial driven by its hyperparameters: it records its pid and
``DET_*`` environment under ``hparams["out"]``, trains ``op.length`` steps (``sleep`` seconds
each), checkpoints every ``ckpt_every`` steps, resumes from ``DET_LATEST_CHECKPOINT``, honours
preemption unless ``ignore_preempt``, exits 3 at once while its run id <= ``fail_runs`` and
exits 0 after acknowledging a preemption while its run id <= ``ack_exit_runs``.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import time
from typing import Any

import requests
import yaml

from _kit.master import MasterProcess
from determined.master.store._enums import TERMINAL

TRAIN_PY = r"""
import json, os, pathlib, sys, time
import determined as det
from determined import core

info = det.get_cluster_info()
hp = info.trial.hparams
out = pathlib.Path(hp["out"])
out.mkdir(parents=True, exist_ok=True)
run = int(os.environ["DET_TRIAL_RUN_ID"])
tag = f"{info.trial.trial_id}.{run}"
env = {k: v for k, v in os.environ.items() if k.startswith(("DET_", "CUDA_", "MY_", "HOOK_"))}
env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
env["cwd"] = os.getcwd()
(out / f"{tag}.env.json").write_text(json.dumps(env))
(out / f"{tag}.pid").write_text(str(os.getpid()))
print(f"hello from trial {info.trial.trial_id} run {run}", flush=True)
print("[rank=0] WARNING: a warning line", file=sys.stderr, flush=True)
if run <= hp.get("fail_runs", 0):
    sys.exit(3)

def save(ctx, steps):
    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
        (path / "state.json").write_text(json.dumps({"steps": steps}))

with core.init() as ctx:
    if run <= hp.get("ack_exit_runs", 0):
        ctx.preempt.acknowledge_preemption_signal()  # as if preempted: exit 0 after an ack
        sys.exit(0)
    steps = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((path / "state.json").read_text())["steps"]
    (out / f"{tag}.resumed").write_text(str(steps))
    for op in ctx.searcher.operations():
        while steps < op.length:
            time.sleep(hp.get("sleep", 0.0))
            steps += 1
            ctx.train.report_training_metrics(steps, {"loss": 1.0 / steps})
            if steps % hp.get("ckpt_every", 1000000) == 0:
                save(ctx, steps)
            if not hp.get("ignore_preempt") and ctx.preempt.should_preempt():
                save(ctx, steps)
                sys.exit(0)
        ctx.train.report_validation_metrics(steps, {"loss": hp.get("metric", 1.0 / steps)})
        save(ctx, steps)
        op.report_completed(hp.get("metric", 1.0 / steps))
"""


def model_definition(files: dict[str, str]) -> list[dict[str, Any]]:
    """The ``modelDefinition`` list of ``POST /api/v1/experiments``."""
    return [
        {
            "path": path,
            "type": "0",
            "mode": 0o755,
            "content": base64.b64encode(text.encode()).decode(),
        }
        for path, text in files.items()
    ]


def config(out: pathlib.Path, *, max_length: int = 3, **hparams: Any) -> dict[str, Any]:
    """A single-searcher config running TRAIN_PY; ``hparams`` go to the trial. ``out`` is
    bound into the trial's sandbox (docs/security.md), where the test reads what it wrote."""
    return {
        "name": "lifecycle",
        "entrypoint": "python3 train.py",
        "max_restarts": 1,
        "searcher": {"name": "single", "metric": "loss", "max_length": max_length},
        "hyperparameters": {"out": str(out), **hparams},
        "bind_mounts": [{"host_path": str(out), "container_path": str(out)}],
    }


class Cluster:
    """An admin session against ``master``, with waiting helpers (every wait has a bound)."""

    def __init__(self, master: MasterProcess) -> None:
        self.master = master
        self.url = master.url
        self.s = master.session()

    def create(
        self, cfg: dict[str, Any], files: dict[str, str] | None = None, *, activate: bool = True
    ) -> int:
        files = {"train.py": TRAIN_PY} if files is None else files
        body = {
            "config": yaml.safe_dump(cfg),
            "modelDefinition": model_definition(files),
            "activate": activate,
        }
        r = self.s.post(self.url + "/api/v1/experiments", json=body)
        assert r.status_code == 200, r.text
        return int(r.json()["experiment"]["id"])

    def get(self, path: str) -> Any:
        r = self.s.get(self.url + path)
        assert r.status_code == 200, r.text
        return r.json()

    def post(self, path: str) -> requests.Response:
        return self.s.post(self.url + path, json={})

    def experiment(self, exp_id: int) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/experiments/{exp_id}")["experiment"])

    def trials(self, exp_id: int) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/experiments/{exp_id}/trials")["trials"])

    def logs(self, task_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/tasks/{task_id}/logs")["logs"])

    def describe(self, exp_id: int, max_lines: int = 400) -> str:
        """The experiment's state and, per trial, its state, restarts and task log (the last
        ``max_lines`` lines), for an assertion message: why a wait failed, after the fact."""
        try:
            exp = self.experiment(exp_id)
            parts = [f"experiment {exp_id}: state {exp.get('state')}"]
            for trial in self.trials(exp_id):
                lines = [
                    f"{e.get('timestamp', '')} [{e.get('stdtype') or e.get('source', '')}] "
                    f"{e.get('log', '').rstrip()}"
                    for e in self.logs(str(trial["taskId"]))
                ]
                cut = len(lines) - max_lines
                parts.append(
                    f"trial {trial['id']}: state {trial.get('state')}, restarts "
                    f"{trial.get('restarts')}, {len(lines)} log lines"
                    + (f" (first {cut} left out)" if cut > 0 else "")
                )
                parts.extend("  " + line for line in lines[-max_lines:])
            return "\n".join(parts)
        except Exception as e:  # the master may be gone; the wait's own message still stands
            return f"(cannot describe experiment {exp_id}: {type(e).__name__}: {e})"

    def wait_log(self, task_id: str, text: str, timeout: float = 15) -> list[str]:
        """The task's log lines once one contains ``text``."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [e["log"] for e in self.logs(task_id)]
            if any(text in line for line in lines):
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line of {task_id} contains {text!r}: {lines}")
            time.sleep(0.1)

    def wait_experiment(self, exp_id: int, *states: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        settled = _Settled(states)
        while True:
            exp = self.experiment(exp_id)
            if exp["state"] in states:
                return exp
            if time.monotonic() > deadline or settled.elsewhere(exp["state"]):
                raise AssertionError(
                    f"experiment {exp_id} is {exp['state']}, not {states}\n" + self.describe(exp_id)
                )
            time.sleep(0.1)

    def wait_trial(self, exp_id: int, *states: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        settled = _Settled(states)
        while True:
            trial = self.trials(exp_id)[0]
            if trial["state"] in states:
                return trial
            if time.monotonic() > deadline or settled.elsewhere(trial["state"]):
                raise AssertionError(
                    f"trial {trial['id']} is {trial['state']}, not {states}\n"
                    + self.describe(exp_id)
                )
            time.sleep(0.1)


# A terminal state other than the awaited one, seen this long without change, fails the wait
# at once instead of at its timeout (a state may still leave it: continue, a restart).
SETTLED_S = 3.0


class _Settled:
    """Whether a wait watches a terminal state it does not wait for, unchanged for
    SETTLED_S."""

    def __init__(self, wanted: tuple[str, ...]) -> None:
        self.wanted = wanted
        self.state: str | None = None
        self.since = 0.0

    def elsewhere(self, state: str) -> bool:
        if state != self.state:
            self.state, self.since = state, time.monotonic()
        return (
            state in TERMINAL  # State is a str enum: its wire names are members
            and state not in self.wanted
            and time.monotonic() - self.since >= SETTLED_S
        )


def wait_file(path: pathlib.Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear in {timeout}s")
        time.sleep(0.05)
    time.sleep(0.05)  # written in one call; let it land
    return path.read_text()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_dead(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} still runs after {timeout}s")
        time.sleep(0.05)


def env_of(out: pathlib.Path, trial_id: int, run: int) -> dict[str, str]:
    return dict(json.loads(wait_file(out / f"{trial_id}.{run}.env.json")))


GC_PY = r"""
import determined as det
from determined import core

hp = det.get_cluster_info().trial.hparams
with core.init() as ctx:
    for op in ctx.searcher.operations():
        for steps, loss in enumerate(hp["losses"], 1):
            ctx.train.report_validation_metrics(steps, {"loss": loss})
            with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                (path / "weights").write_text(str(steps))
        op.report_completed(hp["losses"][-1])
"""


def sleepers(marker: str) -> list[int]:
    """Processes still running ``sleep 300`` from a work dir under ``marker``."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            cwd = str((proc / "cwd").resolve())
        except OSError:
            continue
        if cmd[:2] == [b"sleep", b"300"] and cwd.startswith(marker) and alive(int(proc.name)):
            found.append(int(proc.name))
    return found
