"""determined/pytorch/_sample_seed.py: seeds derived from (seed, epoch, index)."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from determined.pytorch import _sample_seed


@given(seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 10**6), index=st.integers(0, 2**40))
def test_sample_seed_is_a_63_bit_pure_function(seed: int, epoch: int, index: int) -> None:
    s = _sample_seed.sample_seed(seed, epoch, index)
    assert 0 <= s < 2**63
    assert s == _sample_seed.sample_seed(seed, epoch, index)
    assert s == _sample_seed.sample_seed(seed, epoch, np.int64(index))


def test_sample_seeds_do_not_collide_on_a_grid() -> None:
    seeds = {
        _sample_seed.sample_seed(seed, epoch, index)
        for seed in range(3)
        for epoch in range(40)
        for index in range(200)
    }
    assert len(seeds) == 3 * 40 * 200
    shuffles = {_sample_seed.shuffle_seed(0, e) for e in range(1000)}
    assert len(shuffles) == 1000 and not shuffles & seeds


def test_string_keys_hash_the_same_in_another_process() -> None:
    here = _sample_seed.sample_seed(1, 2, "img_0042.png")
    code = (
        "from determined.pytorch import _sample_seed;"
        "print(_sample_seed.sample_seed(1, 2, 'img_0042.png'))"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert int(there) == here


def test_epoch_seeded_random_sampler_is_a_function_of_the_epoch() -> None:
    a = _sample_seed._EpochSeededRandomSampler(range(30), seed=5)
    epochs = [list(a) for _ in range(3)]
    assert all(sorted(e) == list(range(30)) for e in epochs)
    assert epochs[0] != epochs[1]
    b = _sample_seed._EpochSeededRandomSampler(range(30), seed=5)
    assert [list(b) for _ in range(3)] == epochs
    assert len(b) == 30


def test_epoch_batches_survive_pickling() -> None:
    tagged = _sample_seed._EpochTaggedBatchSampler([[0, 1], [2]])
    first = list(tagged)
    second = list(tagged)
    assert [b.epoch for b in first + second] == [0, 0, 1, 1]  # type: ignore[attr-defined]
    copy = pickle.loads(pickle.dumps(second[0]))
    assert copy == [0, 1] and copy.epoch == 1


class _Draws(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[int, float, float, float]:
        return i, random.random(), float(np.random.rand()), float(torch.rand(()))


class _BatchedDraws(_Draws):
    def __getitems__(self, indices: list[int]) -> list[tuple[int, float]]:
        return [(i, float(torch.rand(()))) for i in indices]


def test_seeded_dataset_draws_depend_only_on_seed_epoch_index() -> None:
    ds = _sample_seed._SampleSeededDataset(_Draws(), seed=9)
    batch = _sample_seed._EpochBatch([3, 1], epoch=2)
    first = ds.__getitems__(batch)
    random.random(), np.random.rand(), torch.rand(3)  # disturb the process's streams
    assert ds.__getitems__(_sample_seed._EpochBatch([1], epoch=2)) == first[1:]
    assert ds.__getitems__(_sample_seed._EpochBatch([1], epoch=3)) != first[1:]
    assert len(ds) == 4 and ds[0] == ds[0]


def test_seeded_dataset_seeds_a_batched_getitems_once_per_batch() -> None:
    ds = _sample_seed._SampleSeededDataset(_BatchedDraws(), seed=9)
    a = ds.__getitems__(_sample_seed._EpochBatch([2, 3], epoch=0))
    b = ds.__getitems__(_sample_seed._EpochBatch([2, 3], epoch=0))
    assert a == b and a[0][1] != a[1][1]


def test_seeded_dataset_forwards_attributes_and_pickles() -> None:
    inner = _Draws()
    inner.classes = ["cat", "dog"]  # type: ignore[attr-defined]
    ds = _sample_seed._SampleSeededDataset(inner, seed=1)
    assert ds.classes == ["cat", "dog"]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.seed == 1 and copy.classes == ["cat", "dog"]
