"""Resume restores the global RNGs so that the first batch after a restore draws the same torch,
numpy and python random numbers as an uninterrupted run, whatever the loader draws when its
iterator is built (docs/reference/harness.md §13: 0.37 builds the training iterator before
restoring the RNG state)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from _kit.pytorch_trials import MLPTrial, params, run_local

from determined.pytorch import Batch

HP = {"lr": 0.01, "dropout": 0.3, "n": 32, "batch_size": 4}  # 8 batches per epoch


class GlobalRandomTrial(MLPTrial):
    """Draws from the global torch, numpy and python RNGs in every batch (dropout plus explicit
    noise) and records what it drew, so a resumed run can be compared draw by draw."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.draws: dict[int, tuple[float, float, float]] = {}

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.draws[batch_idx] = (float(torch.rand(())), float(np.random.rand()), random.random())
        return super().train_batch(batch, epoch_idx, batch_idx)


class PlainLoaderTrial(GlobalRandomTrial):
    """Returns plain ``torch.utils.data.DataLoader`` objects (no skip on resume)."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        context.experimental.disable_dataset_reproducibility_checks()

    def build_training_data_loader(self) -> Any:
        return torch.utils.data.DataLoader(self.train_set, batch_size=4)

    def build_validation_data_loader(self) -> Any:
        return torch.utils.data.DataLoader(self.val_set, batch_size=4)


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _straight_and_resumed(cls: type, k: int, n: int) -> tuple[Any, Any]:
    # No experiment seed: the loader's iterator draws its base seed from the global torch RNG.
    _seed_all(0)
    straight, _, _ = run_local(cls, hparams=HP, max_length=Batch(n))
    _seed_all(0)
    _, cap, _ = run_local(cls, hparams=HP, max_length=Batch(k))
    _seed_all(123)  # another process: only the checkpoint's RNG state can make it match
    resumed, _, _ = run_local(cls, hparams=HP, max_length=Batch(n), latest_checkpoint=cap.uuids[-1])
    return straight, resumed


@pytest.mark.parametrize("k", [3, 8])  # mid-epoch, and at the end of the first epoch
def test_det_loader_resume_draws_the_same_random_numbers(k: int) -> None:
    """det.pytorch.DataLoader without an experiment seed: the first batch after the restore
    draws what the uninterrupted run drew, and the weights end bitwise equal."""
    straight, resumed = _straight_and_resumed(GlobalRandomTrial, k, 12)
    assert sorted(resumed.draws) == list(range(k, 12))
    assert resumed.draws == {i: straight.draws[i] for i in range(k, 12)}
    for a, b in zip(params(straight.model), params(resumed.model), strict=True):
        assert torch.equal(a, b)


def test_plain_torch_loader_resume_at_an_epoch_end_is_bitwise() -> None:
    """A plain torch DataLoader restarts at its first batch, so resuming at an epoch boundary
    must match an uninterrupted run bitwise, random draws included."""
    straight, resumed = _straight_and_resumed(PlainLoaderTrial, 8, 12)
    assert resumed.draws == {i: straight.draws[i] for i in range(8, 12)}
    for a, b in zip(params(straight.model), params(resumed.model), strict=True):
        assert torch.equal(a, b)
