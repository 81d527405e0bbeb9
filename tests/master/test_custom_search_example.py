"""examples/custom_search runs as shipped: its LocalSearchRunner creates the experiment on a
real master with two CPU slots, the Bayesian-style method picks every trial's hyperparameters
(the first ones at random, later ones from the results) and shuts the search down."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from _kit.master import REPO, MasterProcess, clean_env

pytestmark = pytest.mark.e2e

EXAMPLE = REPO / "examples" / "custom_search"


def test_local_runner_runs_the_bayesian_search(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path / "master", cpu_slots=2) as master:
        env = clean_env(tmp_path / "home")
        env["DET_MASTER"] = master.url
        env["PYTHONPATH"] = f"{REPO}{os.pathsep}{EXAMPLE}"
        args = ["--max-trials", "4", "--length", "10", "--searcher-dir", str(tmp_path / "s")]
        proc = subprocess.run(
            [sys.executable, "local_runner.py", *args],
            cwd=EXAMPLE,
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        exp_id = int((tmp_path / "s" / "experiment_id.txt").read_text())
        admin = master.session()
        exp = admin.get(master.url + f"/api/v1/experiments/{exp_id}").json()["experiment"]
        trials = admin.get(master.url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    assert exp["state"] == "STATE_COMPLETED"
    assert exp["config"]["searcher"]["name"] == "custom"
    assert len(trials) == 4 and all(t["state"] == "STATE_COMPLETED" for t in trials)
    assert all(t["totalBatchesProcessed"] == 10 for t in trials)
    assert all(set(t["hparams"]) == {"lr", "momentum"} for t in trials)
    assert "best (hparams, validation_mse)" in proc.stdout
