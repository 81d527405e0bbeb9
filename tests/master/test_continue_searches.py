"""``det e continue`` as 0.37 allows it beyond one trial's longer ``max_length``: a grid or
random search reruns the trials that did not complete (and is refused once every trial
completed), and a single-trial experiment continues under changed hyperparameters. Real master,
real trial processes; the continues go through 0.37's own ``det``."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from _kit.master import MasterProcess
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster, config

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not REF.exists(), reason="no .refvenv: run scripts/setup.sh --tests"),
]


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    m = MasterProcess(tmp_path_factory.mktemp("continue-searches") / "master", cpu_slots=1)
    m.start()
    yield m
    m.stop()


def _continue(cluster: Cluster, exp_id: int, override: Any) -> Any:
    body = {"id": exp_id, "overrideConfig": yaml.safe_dump(override)}
    return cluster.s.post(cluster.url + "/api/v1/experiments/continue", json=body)


def _ref(master: MasterProcess, home: pathlib.Path) -> Ref:
    ref = Ref(master, home)
    ref.env["DET_USER"] = "admin"  # the cluster's admin owns the experiments
    return ref


def test_grid_search_reruns_only_its_unfinished_trials(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    cluster = Cluster(master)
    out = tmp_path / "out"
    cfg = config(out, max_length=2)
    cfg["searcher"] = {"name": "grid", "metric": "loss", "max_length": 2}
    # max_restarts 1: the trial failing its first two runs errors; the other completes.
    cfg["hyperparameters"]["fail_runs"] = {"type": "categorical", "vals": [0, 2]}
    exp_id = cluster.create(cfg)
    first = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    by_hp = {t["hparams"]["fail_runs"]: t for t in cluster.trials(exp_id)}
    assert (by_hp[0]["state"], by_hp[2]["state"]) == ("STATE_COMPLETED", "STATE_ERROR")
    assert by_hp[2]["restarts"] == 1  # 2 stored; shown as LEAST(restarts, max_restarts)

    ref = _ref(master, tmp_path / "home")
    # A grid search takes no overrides (0.37 refuses them too).
    refused = ref.det("e", "continue", str(exp_id), "--config", "max_restarts=3", ok=False)
    assert "not single searcher" in refused, refused
    assert f"Continued experiment {exp_id}" in ref.det("e", "continue", str(exp_id))
    done = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=120)
    assert done["state"] == "STATE_COMPLETED", (first["state"], done)
    again = {t["hparams"]["fail_runs"]: t for t in cluster.trials(exp_id)}
    assert len(again) == 2
    # The errored trial ran a third time (its run id now past fail_runs) and completed with
    # a fresh restart count; the completed one was left alone.
    assert (again[2]["state"], again[2]["restarts"], again[2]["totalBatchesProcessed"]) == (
        "STATE_COMPLETED",
        0,
        2,
    )
    assert sorted(p.name for p in out.glob(f"{again[2]['id']}.*.pid")) == [
        f"{again[2]['id']}.{r}.pid" for r in (1, 2, 3)
    ]
    assert [p.name for p in out.glob(f"{again[0]['id']}.*.pid")] == [f"{again[0]['id']}.1.pid"]
    assert again[0]["endTime"] == by_hp[0]["endTime"]

    # Every trial completed: nothing left to continue.
    refused = ref.det("e", "continue", str(exp_id), ok=False)
    assert "experiment has been completed, cannot continue this experiment" in refused, refused
    assert cluster.experiment(exp_id)["state"] == "STATE_COMPLETED"


def test_random_search_killed_midway_continues(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    cluster = Cluster(master)
    out = tmp_path / "out"
    cfg = config(out, max_length=2)
    cfg["searcher"] = {"name": "random", "metric": "loss", "max_length": 2, "max_trials": 2}
    exp_id = cluster.create(cfg, activate=False)
    assert cluster.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_CANCELED")
    assert {t["state"] for t in cluster.trials(exp_id)} == {"STATE_CANCELED"}
    r = _continue(cluster, exp_id, {})
    assert r.status_code == 200, r.text
    # Live again; RUNNING once the resource manager started a trial before the answer.
    assert r.json()["experiment"]["state"] in ("STATE_ACTIVE", "STATE_QUEUED", "STATE_RUNNING")
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=120)
    trials = cluster.trials(exp_id)
    assert [(t["state"], t["totalBatchesProcessed"]) for t in trials] == [
        ("STATE_COMPLETED", 2)
    ] * 2

    # Without a max_length the trials decide their length: nothing to continue them to.
    cfg["searcher"] = {"name": "random", "metric": "loss", "max_trials": 1}
    free = cluster.create(cfg, activate=False)
    assert cluster.post(f"/api/v1/experiments/{free}/kill").status_code == 200
    cluster.wait_experiment(free, "STATE_CANCELED")
    r = _continue(cluster, free, {})
    assert r.status_code == 400 and "sets no searcher.max_length" in r.text, r.text


def test_single_trial_continues_with_changed_hyperparameters(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    cluster = Cluster(master)
    out = tmp_path / "out"
    cfg = config(out, max_length=2, metric=0.5)
    cfg["hyperparameters"]["lr"] = {"type": "double", "minval": 0.1, "maxval": 0.2}
    cfg["hyperparameters"]["keep"] = {"type": "int", "minval": 1, "maxval": 1000}
    exp_id = cluster.create(cfg)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [before] = cluster.trials(exp_id)
    assert 0.1 <= before["hparams"]["lr"] < 0.2

    ref = _ref(master, tmp_path / "home")
    args = ["--config", "searcher.max_length=4", "--config", "hyperparameters.metric=0.25"]
    assert f"Continued experiment {exp_id}" in ref.det("e", "continue", str(exp_id), *args)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    assert trial["hparams"]["metric"] == 0.25
    assert trial["hparams"]["lr"] == before["hparams"]["lr"]  # unchanged: kept
    assert trial["totalBatchesProcessed"] == 4
    assert trial["latestValidation"]["metrics"]["avgMetrics"]["loss"] == 0.25
    assert (out / f"{trial['id']}.2.resumed").read_text() == "2"  # from its checkpoint

    # A changed range is drawn again (the override merges into the config, as 0.37's does).
    hps = {"lr": {"minval": 1.0, "maxval": 2.0}, "metric": 0.125}
    exp = cluster.experiment(exp_id)["config"]
    override = {"searcher": {"max_length": 6}, "hyperparameters": hps}
    r = _continue(cluster, exp_id, override)
    assert r.status_code == 200, r.text
    cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    [trial] = cluster.trials(exp_id)
    assert 1.0 <= trial["hparams"]["lr"] < 2.0
    assert trial["hparams"]["keep"] == before["hparams"]["keep"]
    assert trial["hparams"]["metric"] == 0.125
    assert cluster.experiment(exp_id)["config"]["hyperparameters"]["lr"]["minval"] == 1.0
    assert exp["hyperparameters"]["lr"]["minval"] == 0.1
    # A hyperparameter space that does not parse is refused before anything changes.
    bad = _continue(
        cluster,
        exp_id,
        {
            "searcher": {"max_length": 8},
            "hyperparameters": {"lr": {"type": "double", "minval": 2.0, "maxval": 1.0}},
        },
    )
    assert bad.status_code == 400 and "hyperparameters" in bad.text, bad.text
