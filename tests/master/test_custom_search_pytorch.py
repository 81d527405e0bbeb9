"""A PyTorchTrial under a custom search (the 0.37 pairing): the search runner's ValidateAfter
lengths reach the Trainer as batches (0.37's unit for a custom search without
``searcher.unit``), each operation ends in a validation, and the trial resumes between
operations from its checkpoint."""

from __future__ import annotations

import pathlib

import pytest
from _kit.custom_search import Steps
from _kit.master import MasterProcess
from _kit.pytorch_model_def import MODEL_DEF

from determined import searcher
from determined.cli import _session

pytestmark = pytest.mark.e2e


def test_pytorch_trial_follows_the_custom_search(tmp_path: pathlib.Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_def.py").write_text(MODEL_DEF)
    config = {
        "name": "custom-pytorch",
        "entrypoint": "model_def:RegressionTrial",
        "max_restarts": 0,
        "searcher": {"name": "custom", "metric": "validation_loss"},
    }
    hparams = [{"lr": 0.05, "global_batch_size": 8}, {"lr": 0.01, "global_batch_size": 8}]
    with MasterProcess(tmp_path / "master", cpu_slots=2) as master:
        sess, _ = _session.login(master.url, "determined", "")
        runner = searcher.LocalSearchRunner(
            Steps(hparams, [4, 8]), searcher_dir=tmp_path / "s", session=sess
        )
        exp_id = runner.run(config, model_dir=str(model))
        admin = master.session()
        exp = admin.get(master.url + f"/api/v1/experiments/{exp_id}").json()["experiment"]
        trials = admin.get(master.url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
        workloads = {
            t["id"]: admin.get(master.url + f"/api/v1/trials/{t['id']}/workloads").json()
            for t in trials
        }
    assert runner.state.experiment_completed
    assert exp["state"] == "STATE_COMPLETED", exp
    assert sorted(t["hparams"]["lr"] for t in trials) == [0.01, 0.05]
    for t in trials:
        assert t["state"] == "STATE_COMPLETED"
        assert t["totalBatchesProcessed"] == 8
        validated = sorted(
            w["validation"]["totalBatches"]
            for w in workloads[t["id"]]["workloads"]
            if "validation" in w
        )
        assert validated[-2:] == [4, 8]
