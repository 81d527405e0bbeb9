"""PyTorchTrial checks and evaluation paths (docs/reference/harness.md §11)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _kit.pytorch_trials import MLPTrial, Regression, run_local

import determined.pytorch as det_torch
from determined import errors
from determined.pytorch import Batch


class BothEval(MLPTrial):
    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        return {}


class NeitherEval(det_torch.PyTorchTrial):
    def __init__(self, context: Any) -> None:
        self.context = context
        m = context.wrap_model(torch.nn.Linear(4, 1))
        context.wrap_optimizer(torch.optim.SGD(m.parameters(), lr=0.1))

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        return {}

    def build_training_data_loader(self) -> Any:
        return det_torch.DataLoader(Regression(), batch_size=4)

    def build_validation_data_loader(self) -> Any:
        return det_torch.DataLoader(Regression(), batch_size=4)


class NoModel(NeitherEval):
    def __init__(self, context: Any) -> None:
        self.context = context

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {}


class NoOptimizer(NoModel):
    def __init__(self, context: Any) -> None:
        self.context = context
        context.wrap_model(torch.nn.Linear(4, 1))


@pytest.mark.parametrize("cls", [BothEval, NeitherEval, NoModel, NoOptimizer])
def test_bad_trials_raise_iee(cls: type) -> None:
    """§19 item 43: both/neither evaluate methods, no model or no optimizer raise IEE."""
    with det_torch.init(hparams={}) as ctx:
        trial = cls(ctx)
        with pytest.raises(errors.InvalidExperimentException):
            det_torch.Trainer(trial, ctx).fit(max_length=Batch(1))


class RawLoader(MLPTrial):
    def build_training_data_loader(self) -> Any:
        return torch.utils.data.DataLoader(self.train_set, batch_size=4)


class RawLoaderUnchecked(RawLoader):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        context.experimental.disable_dataset_reproducibility_checks()


def test_raw_torch_loader_needs_checks_disabled() -> None:
    """§19 item 44: a raw torch DataLoader raises RuntimeError unless checks are disabled; a
    disabled one is used as is (and re-iterated when exhausted, unlike 0.37's Q5 spin)."""
    with pytest.raises(RuntimeError, match="disable_dataset_reproducibility_checks"):
        run_local(RawLoader)
    trial, _, _ = run_local(RawLoaderUnchecked, max_length=Batch(25))  # 10 batches per pass
    assert [i for _, i in trial.events] == list(range(25))


class NoIdxEval(MLPTrial):
    def evaluate_batch(self, batch: Any) -> dict[str, Any]:  # type: ignore[override]
        self.calls = getattr(self, "calls", 0) + 1
        return {"val_loss": 1.0}


def test_evaluate_batch_without_batch_idx() -> None:
    """§19 item 51: evaluate_batch(self, batch) is called without batch_idx."""
    trial, cap, _ = run_local(NoIdxEval, validation_period=Batch(10))
    assert trial.calls == 3  # 12 validation records in batches of 4
    assert cap.validation == [{"val_loss": 1.0}]


class FullDataset(MLPTrial):
    evaluate_batch = det_torch.PyTorchTrial.evaluate_batch  # type: ignore[assignment]

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        n = sum(len(x) for x, _ in data_loader)
        return {"records": n, "loss": torch.tensor(0.5)}


def test_evaluate_full_dataset_sees_the_whole_set() -> None:
    """§11: evaluate_full_dataset gets the unsharded loader and its dict is reported."""
    _, cap, _ = run_local(FullDataset, validation_period=Batch(10))
    assert cap.validation == [{"records": 12, "loss": 0.5}]


class BadFullDataset(FullDataset):
    def evaluate_full_dataset(self, data_loader: Any) -> Any:
        return 1.0


def test_evaluate_full_dataset_must_return_a_dict() -> None:
    """§11: a non-dict full-dataset result raises TypeError."""
    with pytest.raises(TypeError):
        run_local(BadFullDataset)


class MissingMetric(MLPTrial):
    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"other": 1.0}


def test_missing_searcher_metric_raises_for_best() -> None:
    """§19 item 53: a missing or non-scalar searcher metric raises RuntimeError."""
    conf = {"searcher": {"metric": "val_loss"}}
    with pytest.raises(RuntimeError, match="val_loss"):
        run_local(MissingMetric, exp_conf=conf, checkpoint_policy="best")


def test_get_batch_length_default() -> None:
    """§11: get_batch_length is data_length: len of the first element; errors as specified."""
    with det_torch.init(hparams={}) as ctx:
        trial = MLPTrial(ctx)
    assert trial.get_batch_length((torch.zeros(3, 2), torch.zeros(3))) == 3
    with pytest.raises(ValueError):
        trial.get_batch_length([])
    with pytest.raises(TypeError):
        trial.get_batch_length(5)


def test_empty_validation_shard_raises() -> None:
    """§19 item 51: an empty validation shard raises RuntimeError."""
    with pytest.raises(RuntimeError, match="no validation batches"):
        run_local(hparams={"val_n": 0}, max_length=Batch(2))


def test_empty_training_loader_raises() -> None:
    """An empty training loader is a ValueError that names the cause, not a ZeroDivisionError."""
    with pytest.raises(ValueError, match="no batches"):
        run_local(hparams={"n": 0}, max_length=Batch(2))


class VectorMetric(MLPTrial):
    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"val_loss": torch.ones(2)}


def test_non_scalar_searcher_metric_raises() -> None:
    """§19 item 53: a non-scalar searcher metric raises RuntimeError."""
    conf = {"searcher": {"metric": "val_loss"}}
    with pytest.raises(RuntimeError, match="numeric scalar"):
        run_local(VectorMetric, exp_conf=conf, checkpoint_policy="best")
