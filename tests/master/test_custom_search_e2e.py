"""Custom search methods end to end (docs/reference/custom_searchers.md): a real master with CPU
slots, real trial processes, and ``LocalSearchRunner`` in its own process driving a random
search and an ASHA-like one, with the runner SIGKILLed mid-search and the master SIGKILLed
mid-search; both must finish with the expected trials and nothing duplicated.
(RemoteSearchRunner: tests/master/test_custom_search_remote.py.)"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from _kit.cli import Det
from _kit.custom_search import TRAIN_PY
from _kit.master import REPO, MasterProcess, clean_env

pytestmark = pytest.mark.e2e


class Runner:
    """``python -m _kit.custom_search METHOD ...`` against ``master``; state in ``tmp``."""

    def __init__(self, master: MasterProcess, tmp: pathlib.Path, method: str) -> None:
        self.master = master
        self.method = method
        self.searcher_dir = tmp / "searcher"
        self.model_dir = tmp / "model"
        self.out = tmp / "out"
        self.log = tmp / "runner.log"
        self.model_dir.mkdir(parents=True, exist_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.model_dir / "train.py").write_text(TRAIN_PY)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = clean_env(self.master.data_dir)
        env["PYTHONPATH"] = f"{REPO}{os.pathsep}{REPO / 'tests'}"
        env["DET_MASTER"] = self.master.url
        args = [self.method, str(self.searcher_dir), str(self.model_dir), str(self.out)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "_kit.custom_search", *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout: float) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.proc.kill()
            tail = self.log.read_text()[-4000:]
            raise AssertionError(f"runner still running:\n{tail}") from e
        assert code == 0, self.log.read_text()[-4000:]

    @property
    def experiment_id(self) -> int:
        return int((self.searcher_dir / "experiment_id.txt").read_text())

    def ops(self) -> list[dict[str, Any]]:
        path = self.out / "ops.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_ops(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.ops()) < n:
            assert time.monotonic() < deadline, self.log.read_text()[-4000:]
            time.sleep(0.2)


def _get(master: MasterProcess, path: str) -> Any:
    r = master.session().get(master.url + path)
    assert r.status_code == 200, r.text
    return r.json()


def test_random_search_resumes_after_the_runner_is_killed(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path / "master", cpu_slots=2) as master:
        runner = Runner(master, tmp_path, "random")
        runner.start()
        runner.wait_ops(1)  # a trial finished its operation: the search is under way
        runner.kill()
        done_before = len(runner.ops())
        runner.start()  # the same searcher_dir: it resumes the same experiment
        runner.wait(timeout=120)
        exp_id = runner.experiment_id
        exp = _get(master, f"/api/v1/experiments/{exp_id}")["experiment"]
        trials = _get(master, f"/api/v1/experiments/{exp_id}/trials")["trials"]
        assert exp["state"] == "STATE_COMPLETED"
        assert exp["progress"] == 1.0
        # exactly max_trials trials: nothing created twice by the restarted runner
        assert len(trials) == 4
        assert all(t["state"] == "STATE_COMPLETED" for t in trials)
        assert len({t["hparams"]["x"] for t in trials}) == 4
        lengths = {(op["trial"], op["length"]) for op in runner.ops()}
        assert lengths == {(t["id"], 3) for t in trials}
        assert done_before < 4
        # the CLI and the web UI list them as ordinary trials of the experiment
        det = Det(tmp_path / "cli", master.url)
        listed = det("experiment", "list-trials", str(exp_id))
        assert listed.returncode == 0, listed.stderr
        for t in trials:
            assert f"| {t['id']} " in listed.stdout or f" {t['id']} " in listed.stdout
        described = det("experiment", "describe", str(exp_id))
        assert described.returncode == 0, described.stderr
        assert "custom" in described.stdout
        page = master.session().get(master.url + f"/experiments/{exp_id}")
        assert page.status_code == 200
        rungs = _get(master, f"/api/v1/webui/experiments/{exp_id}/rungs")
        assert rungs == {"searcher": "custom", "brackets": []}


def test_asha_like_search_survives_a_master_restart(tmp_path: pathlib.Path) -> None:
    master = MasterProcess(tmp_path / "master", cpu_slots=2)
    master.start()
    try:
        runner = Runner(master, tmp_path, "asha")
        runner.start()
        runner.wait_ops(2)  # rung 0 under way
        master.kill()
        master.start()  # same port and data dir; the runner waits for it
        runner.wait(timeout=150)
        exp_id = runner.experiment_id
        exp = _get(master, f"/api/v1/experiments/{exp_id}")["experiment"]
        trials = _get(master, f"/api/v1/experiments/{exp_id}/trials")["trials"]
    finally:
        master.stop()
    assert exp["state"] == "STATE_COMPLETED"
    assert len(trials) == 4
    assert all(t["state"] == "STATE_COMPLETED" for t in trials)
    reached: dict[int, int] = {}
    for op in runner.ops():
        reached[op["trial"]] = max(reached.get(op["trial"], 0), op["length"])
    by_x = sorted(trials, key=lambda t: t["hparams"]["x"])
    # the better half (smaller x, so smaller loss) was promoted to length 3; the rest closed
    assert [reached[t["id"]] for t in by_x] == [3, 3, 1, 1]
