"""docs/reference/master.md §6 items 1–3 against a real master running a real trial: bad configs are
refused at create (and nothing is created), the stored config and the one the trial receives
(``DET_EXPERIMENT_CONFIG``) hold every §2.2 default, and a missing ``experiment_seed`` is
filled once and stays fixed (across a master restart and a continue)."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml
from _kit.master import MasterProcess
from _kit.trial_cluster import TRAIN_PY, Cluster, config, env_of, model_definition

pytestmark = pytest.mark.e2e


def test_bad_configs_refused_defaults_filled_seed_fixed(tmp_path: pathlib.Path) -> None:
    m = MasterProcess(tmp_path / "master", cpu_slots=1)
    m.start()
    try:
        cluster = Cluster(m)
        out = tmp_path / "out"
        good = config(out, max_length=2)
        del good["max_restarts"]
        bad = {
            "unknown top-level key": ({**good, "bogus_key": 1}, "bogus_key"),
            "no searcher.metric": (
                {**good, "searcher": {"name": "single", "max_length": 2}},
                "metric",
            ),
            "no entrypoint": ({k: v for k, v in good.items() if k != "entrypoint"}, "entrypoint"),
        }
        for why, (cfg, word) in bad.items():
            body = {"config": yaml.safe_dump(cfg), "modelDefinition": model_definition({})}
            r = cluster.s.post(cluster.url + "/api/v1/experiments", json=body)
            assert r.status_code == 400, (why, r.text)
            assert word in r.json()["message"], (why, r.json()["message"])
        assert cluster.get("/api/v1/experiments")["experiments"] == []  # nothing half-created

        exp_id = cluster.create(good, {"train.py": TRAIN_PY})
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        stored = cluster.experiment(exp_id)["config"]
        [trial] = cluster.trials(exp_id)
        delivered = json.loads(env_of(out, trial["id"], 1)["DET_EXPERIMENT_CONFIG"])
        assert delivered == stored
        defaults = {
            "max_restarts": 5,
            "scheduling_unit": 100,
            "records_per_epoch": 0,
            "min_validation_period": {"batches": 0},
            "min_checkpoint_period": {"batches": 0},
            "perform_initial_validation": False,
            "checkpoint_policy": "best",
            "debug": False,
            "labels": [],
            "description": None,
            # The kit binds its out dir: the mount's defaults are filled in.
            "bind_mounts": [
                {
                    "host_path": str(out),
                    "container_path": str(out),
                    "read_only": False,
                    "propagation": "rprivate",
                }  # fmt: skip
            ],
        }
        for key, value in defaults.items():
            assert stored[key] == value, key
        assert stored["name"] == "lifecycle"  # given, kept
        res = stored["resources"]
        assert (res["slots_per_trial"], res["weight"], res["max_slots"]) == (1, 1, None)
        assert stored["optimizations"]["aggregation_frequency"] == 1
        assert stored["optimizations"]["mixed_precision"] == "O0"
        assert stored["profiling"]["enabled"] is False
        assert stored["environment"]["environment_variables"] is not None
        storage = stored["checkpoint_storage"]
        assert (storage["save_trial_latest"], storage["save_trial_best"]) == (1, 1)
        assert storage["save_experiment_best"] == 0

        seed = stored["reproducibility"]["experiment_seed"]
        assert isinstance(seed, int) and 0 <= seed < 2**32
        m.stop()
        m.start()
        cluster = Cluster(m)
        assert cluster.experiment(exp_id)["config"]["reproducibility"]["experiment_seed"] == seed
        body = {"id": exp_id, "overrideConfig": "searcher: {max_length: 3}"}
        r = cluster.s.post(cluster.url + "/api/v1/experiments/continue", json=body)
        assert r.status_code == 200, r.text
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
        again = json.loads(env_of(out, trial["id"], 2)["DET_EXPERIMENT_CONFIG"])
        assert again["reproducibility"]["experiment_seed"] == seed
        first_seed = env_of(out, trial["id"], 1)["DET_TRIAL_SEED"]
        assert env_of(out, trial["id"], 2)["DET_TRIAL_SEED"] == first_seed
    finally:
        m.stop()
