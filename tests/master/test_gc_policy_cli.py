"""``det e set gc-policy|max-slots|weight|priority`` (ours, and Determined 0.37's own ``det``)
against a real master with a real experiment: the preview of what a policy deletes
(``GET /experiments/{id}/preview_gc``), the confirmation, the PATCH and the GC it triggers."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest
from _kit.master import REPO, MasterProcess
from _kit.trial_cluster import GC_PY, Cluster, config

pytestmark = pytest.mark.e2e

REF_DET = REPO / ".refvenv" / "bin" / "det"


def _states(cluster: Cluster, exp_id: int) -> dict[int, str]:
    rows = cluster.get(f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    return {c["metadata"]["steps_completed"]: c["state"] for c in rows}


def _wait_deleted(cluster: Cluster, exp_id: int, n: int) -> dict[int, str]:
    deadline = time.monotonic() + 15
    while list(_states(cluster, exp_id).values()).count("STATE_DELETED") < n:
        assert time.monotonic() < deadline, _states(cluster, exp_id)
        time.sleep(0.1)
    return _states(cluster, exp_id)


def test_set_gc_policy_previews_asks_and_collects(tmp_path: pathlib.Path) -> None:
    m = MasterProcess(tmp_path / "master", cpu_slots=1)
    m.start()
    try:
        cluster = Cluster(m)
        cfg = config(tmp_path / "out", max_length=5, losses=[5.0, 1.0, 4.0, 2.0, 3.0])
        cfg["entrypoint"] = "python3 gc.py"
        cfg["checkpoint_storage"] = {
            "type": "shared_fs",
            "host_path": str(tmp_path / "ckpts"),
            "save_experiment_best": 2,
            "save_trial_best": 1,
            "save_trial_latest": 1,
        }
        exp_id = cluster.create(cfg, {"gc.py": GC_PY})
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        _wait_deleted(cluster, exp_id, 2)  # the end of the experiment kept 2, 4 and 5
        n = str(exp_id)

        env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        env.update(DET_HOME=str(tmp_path / "home"), DET_MASTER=m.url, PYTHONPATH=str(REPO))

        def det(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "determined.cli", *args]
            return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env)

        assert det("user", "login", "admin").returncode == 0
        policy = ["--save-experiment-best", "0", "--save-trial-best", "1"]
        policy += ["--save-trial-latest", "1"]
        no = det("e", "set", "gc-policy", n, *policy, stdin="n\n")
        assert no.returncode == 0, no.stderr
        assert "This policy will delete 1 checkpoints with validations and 0 checkpoints " in (
            no.stdout
        )
        assert no.stdout.rstrip().endswith("Aborting operations.")
        rows = [[c.strip() for c in line.split("|")] for line in no.stdout.splitlines()]
        assert ["Trial ID", "# of Batches", "State", "Validation Metric (loss)", "UUID"] in rows
        [row] = [r for r in rows if r[:2] == [str(cluster.trials(exp_id)[0]["id"]), "4"]]
        assert row[2:4] == ["COMPLETED", "2.0"]  # step 4's checkpoint and its loss
        time.sleep(0.3)
        assert list(_states(cluster, exp_id).values()).count("STATE_DELETED") == 2

        yes = det("e", "set", "gc-policy", n, *policy, stdin="y\n")
        assert yes.returncode == 0, yes.stderr
        assert yes.stdout.endswith(
            f"Set GC policy of experiment {n} to\n{{'save_experiment_best': 0, "
            "'save_trial_best': 1, 'save_trial_latest': 1}\n"
        )
        states = _wait_deleted(cluster, exp_id, 3)
        assert [s for s, st in sorted(states.items()) if st == "STATE_COMPLETED"] == [2, 5]

        for cmd, value, field, msg in (
            ("max-slots", "3", ("resources", "max_slots"), 3),
            ("weight", "0.5", ("resources", "weight"), 0.5),
            ("priority", "7", ("resources", "priority"), 7),
        ):
            out = det("e", "set", cmd, n, value)
            name = field[1]
            assert out.stdout == f"Set `{name}` of experiment {n} to {msg}\n", out.stderr
            assert cluster.experiment(exp_id)["config"][field[0]][name] == msg

        out = det("e", "set", "max-slots", n, "none")
        assert out.stdout == f"Set `max_slots` of experiment {n} to None\n", out.stderr
        assert cluster.experiment(exp_id)["config"]["resources"]["max_slots"] is None

        if REF_DET.exists():  # the reference's preview reads the same answer
            ref_env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "PYTHON"))}
            # The cluster's admin created the experiment: only its owner or an admin edits it.
            ref_env.update(HOME=str(tmp_path), DET_USER="admin", DET_PASS="")
            cmd = [str(REF_DET), "-m", m.url, "e", "set", "gc-policy", n]
            cmd += ["--save-experiment-best", "0", "--save-trial-best", "0"]
            cmd += ["--save-trial-latest", "1"]
            ref = subprocess.run(
                cmd, input="y\n", capture_output=True, text=True, env=ref_env, cwd=tmp_path
            )
            assert ref.returncode == 0, ref.stdout + ref.stderr
            assert "This policy will delete 1 checkpoints with validations and 0" in ref.stdout
            assert f"Set GC policy of experiment {n} to" in ref.stdout
            states = _wait_deleted(cluster, exp_id, 4)
            assert [s for s, st in states.items() if st == "STATE_COMPLETED"] == [5]
        else:
            pytest.skip("no .refvenv: the reference's gc-policy preview was not checked")
    finally:
        m.stop()
