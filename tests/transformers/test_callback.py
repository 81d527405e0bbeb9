"""DetCallback's checks and metric grouping without a master: a local Core API context and the
cluster info a trial would see (the e2e module runs it on a master)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")

import determined as det  # noqa: E402
from determined import core  # noqa: E402
from determined.transformers import DetCallback, _callback  # noqa: E402


def _info(max_length: Any, name: str = "single") -> det.ClusterInfo:
    searcher = {"name": name, "metric": "eval_loss", "max_length": max_length}
    trial = det.TrialInfo(
        trial_id=5,
        experiment_id=2,
        trial_seed=0,
        hparams={},
        config={"searcher": searcher, "hyperparameters": {}},
        steps_completed=0,
        trial_run_id=1,
    )
    return det.ClusterInfo(
        master_url="http://127.0.0.1:1",
        cluster_id="c",
        agent_id="a",
        slot_ids=[0],
        task_id="t",
        allocation_id="t.1",
        session_token="s",
        task_type="TRIAL",
        trial_info=trial,
    )


@pytest.fixture
def core_context(tmp_path: pathlib.Path) -> Iterator[core.Context]:
    with core.init(checkpoint_storage=str(tmp_path / "ckpt")) as ctx:
        yield ctx


def _callback_for(
    monkeypatch: pytest.MonkeyPatch,
    ctx: core.Context,
    tmp_path: pathlib.Path,
    max_length: Any,
    **args: Any,
) -> DetCallback:
    monkeypatch.setattr(det._info, "_cached", _info(max_length))
    targs = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), **args)
    return DetCallback(ctx, targs)


@pytest.mark.parametrize(
    ("max_length", "args", "message"),
    [
        ({"batches": 10}, {"max_steps": 5}, "batches=5 but searcher.max_length is batches=10"),
        ({"batches": 10}, {"num_train_epochs": 2}, "epochs=2 but searcher.max_length is batches"),
        ({"epochs": 3}, {"num_train_epochs": 2}, "epochs=2 but searcher.max_length is epochs=3"),
        ({"epochs": 3}, {"max_steps": 7}, "batches=7 but searcher.max_length is epochs=3"),
        ({"records": 640}, {"max_steps": 7}, "does not count"),
    ],
)
def test_lengths_that_disagree_with_the_searcher_are_refused(
    monkeypatch: pytest.MonkeyPatch,
    core_context: core.Context,
    tmp_path: pathlib.Path,
    max_length: dict[str, int],
    args: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(ValueError, match=message):
        _callback_for(monkeypatch, core_context, tmp_path, max_length, **args)


def test_matching_lengths_are_accepted(
    monkeypatch: pytest.MonkeyPatch, core_context: core.Context, tmp_path: pathlib.Path
) -> None:
    cb = _callback_for(monkeypatch, core_context, tmp_path, {"epochs": 2}, num_train_epochs=2)
    assert (cb.searcher_unit, cb.searcher_max_length, cb.searcher_metric) == (
        "epochs",
        2,
        "eval_loss",
    )
    assert cb.last_metrics == {"train_step": -1, "eval_step": -1}


def test_outside_a_trial_it_says_where_it_runs(
    monkeypatch: pytest.MonkeyPatch, core_context: core.Context, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(det._info, "_cached", None)
    targs = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3)
    with pytest.raises(AssertionError, match="det experiment create"):
        DetCallback(core_context, targs)


def test_a_log_is_grouped_by_its_first_key_and_filtered_by_substring(
    monkeypatch: pytest.MonkeyPatch, core_context: core.Context, tmp_path: pathlib.Path
) -> None:
    assert _callback.get_metric_type({"eval_loss": 1.0, "epoch": 1}) == _callback.EVAL
    assert _callback.get_metric_type({"test_acc": 1.0}) == _callback.TEST
    assert _callback.get_metric_type({"loss": 1.0, "eval_loss": 2.0}) == _callback.TRAIN
    assert _callback.get_metric_type({}) == _callback.TRAIN
    cb = _callback_for(monkeypatch, core_context, tmp_path, {"batches": 4}, max_steps=4)
    cb.filter_metrics = ["loss"]
    kept, kind = cb._get_metrics({"eval_loss": 1.0, "eval_runtime": 2.0, "epoch": 1.0})
    assert (kept, kind) == ({"eval_loss": 1.0}, _callback.EVAL)
    assert _callback.get_ds_config_path_from_args(["run.py", "--deepspeed", "ds.json"]) == "ds.json"
    assert _callback.get_ds_config_path_from_args(["run.py", "--deepspeed"]) is None
