"""The Slurm resource manager (docs/deploy/slurm.md) against a real two-node Slurm started
under tmp_path (tests/_kit/slurm_cluster.py): each trial allocation is one Slurm job."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import yaml
from _kit.master import MasterProcess
from _kit.slurm_cluster import SlurmCluster, missing
from _kit.trial_cluster import Cluster, config, env_of

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        bool(missing()),
        reason=f"Slurm binaries missing ({', '.join(missing())}): "
        "apt-get install -y slurm-wlm munge (scripts/setup.sh --tests)",
    ),
]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _master(tmp: pathlib.Path, slurm: SlurmCluster, **rm: object) -> MasterProcess:
    conf = tmp / "master.yaml"
    conf.write_text(yaml.safe_dump({"resource_manager": {"type": "slurm", **rm}}))
    m = MasterProcess(tmp / "master", config_file=conf, env={"SLURM_CONF": slurm.env["SLURM_CONF"]})
    m.start()
    return m


def _job_of(cluster: Cluster, task_id: str) -> str:
    lines = cluster.wait_log(task_id, "submitted as Slurm job")
    line = next(x for x in lines if "submitted as Slurm job" in x)
    return line.split("Slurm job ")[1].split()[0]


def test_core_api_trial_runs_as_a_slurm_job(tmp_path: pathlib.Path, slurm: SlurmCluster) -> None:
    with _master(tmp_path, slurm, default_compute_resource_pool="debug") as m:
        cluster = Cluster(m)
        out = tmp_path / "out"
        exp_id = cluster.create(config(out, max_length=2))
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=60)
        [trial] = cluster.trials(exp_id)
        env = env_of(out, trial["id"], 1)
        assert env["DET_RESOURCES_TYPE"] == "slurm-job"
        assert env["DET_MASTER"].startswith("http://127.0.0.1:")
        task = trial["taskId"]
        job = _job_of(cluster, task)
        lines = cluster.wait_log(task, f"hello from trial {trial['id']} run 1")
        assert "a warning line" in "\n".join(lines)  # stderr too
        shown = slurm.run("scontrol", "-o", "show", "job", job)
        assert "JobState=COMPLETED" in shown and "ExitCode=0:0" in shown, shown
        assert "JobName=det-" in shown and "Partition=debug" in shown, shown
        assert exp["state"] == "STATE_COMPLETED"
