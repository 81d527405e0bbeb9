"""det.pytorch.DataLoader: argument rules, get_data_loader's repeat/shard/skip, exact resume."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

import determined.pytorch as det_torch
from determined.pytorch import _data, samplers


class IndexDataset(torch.utils.data.Dataset):
    """Sample i is the tensor [i]; remembers every index it was asked for."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        self.loaded.append(i)
        return torch.tensor([i])


class AugmentingDataset(torch.utils.data.Dataset):
    """Sample i is i plus draws from random, numpy and torch: a stand-in for augmentation."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = [random.random(), float(np.random.rand()), float(torch.rand(()))]
        return torch.tensor([float(i), *noise], dtype=torch.float64)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield 1


def _take(loader: torch.utils.data.DataLoader, n: int) -> list[list[int]]:
    return [b.flatten().tolist() for b in itertools.islice(loader, n)]


def test_exports_match_all() -> None:
    for name in det_torch.__all__:
        assert hasattr(det_torch, name), name
    assert not [n for n in det_torch.__all__ if n.startswith("_")]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dataset": Stream()}, "IterableDataset"),
        ({"shuffle": True, "sampler": torch.utils.data.SequentialSampler(range(4))}, "shuffle"),
        ({"batch_size": 2, "batch_sampler": [[0, 1]]}, "batch_sampler"),
        ({"batch_sampler": [[0, 1]], "shuffle": True}, "batch_sampler"),
        ({"batch_sampler": [[0, 1]], "drop_last": True}, "batch_sampler"),
        (
            {"batch_sampler": [[0]], "sampler": torch.utils.data.SequentialSampler(range(4))},
            "batch_sampler",
        ),
        ({"batch_size": None}, "batch_size"),
        ({"num_workers": -1}, "num_workers"),
        ({"timeout": -1}, "timeout"),
        ({"prefetch_factor": 2}, "prefetch_factor"),
        ({"num_workers": 1, "prefetch_factor": -1}, "prefetch_factor"),
        ({"persistent_workers": True}, "persistent_workers"),
    ],
)
def test_rejects_invalid_arguments(kwargs: dict[str, Any], match: str) -> None:
    kwargs.setdefault("dataset", IndexDataset(4))
    with pytest.raises(ValueError, match=match):
        det_torch.DataLoader(**kwargs)


def test_defaults_follow_torch() -> None:
    ds = IndexDataset(5)
    plain = det_torch.DataLoader(ds, batch_size=2)
    assert isinstance(plain.sampler, torch.utils.data.SequentialSampler)
    assert isinstance(plain.batch_sampler, torch.utils.data.BatchSampler)
    assert (plain.batch_size, plain.drop_last, plain.prefetch_factor) == (2, False, None)
    assert isinstance(
        det_torch.DataLoader(ds, shuffle=True).sampler, torch.utils.data.RandomSampler
    )
    custom = det_torch.DataLoader(ds, batch_sampler=[[0, 1], [4]])  # type: ignore[arg-type]
    assert custom.batch_size is None
    assert _take(custom.get_data_loader(), 5) == [[0, 1], [4]]
    assert det_torch.DataLoader(ds, num_workers=2).prefetch_factor == 2


def test_iterates_like_a_torch_loader() -> None:
    ds = IndexDataset(7)
    ours = det_torch.DataLoader(ds, batch_size=3, drop_last=False)
    theirs = torch.utils.data.DataLoader(ds, batch_size=3)
    assert len(ours) == len(theirs) == 3
    assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
    assert len(det_torch.DataLoader(ds, batch_size=3, drop_last=True)) == 2


def test_repeat_is_infinite_and_len_is_one_epoch() -> None:
    loader = det_torch.DataLoader(IndexDataset(5), batch_size=2).get_data_loader(repeat=True)
    assert len(loader) == 3
    assert _take(loader, 7) == [[0, 1], [2, 3], [4], [0, 1], [2, 3], [4], [0, 1]]


def test_shards_round_robin_by_rank() -> None:
    loader = det_torch.DataLoader(IndexDataset(10), batch_size=2)  # 5 batches
    got = {r: _take(loader.get_data_loader(num_replicas=2, rank=r), 10) for r in range(2)}
    assert got == {0: [[0, 1], [4, 5], [8, 9]], 1: [[2, 3], [6, 7]]}
    assert [len(loader.get_data_loader(num_replicas=2, rank=r)) for r in range(2)] == [3, 2]
    rep = _take(loader.get_data_loader(repeat=True, num_replicas=2, rank=1), 4)
    assert rep == [[2, 3], [6, 7], [0, 1], [4, 5]]


@pytest.mark.parametrize(("num_replicas", "rank"), [(2, 2), (2, -1), (0, 0), (1, 1)])
def test_bad_rank_raises(num_replicas: int, rank: int) -> None:
    loader = det_torch.DataLoader(IndexDataset(4))
    with pytest.raises(ValueError, match="rank|num_replicas"):
        loader.get_data_loader(num_replicas=num_replicas, rank=rank)


def test_negative_skip_raises() -> None:
    with pytest.raises(ValueError, match="skip"):
        det_torch.DataLoader(IndexDataset(4)).get_data_loader(skip=-1)


def test_adapt_batch_sampler_order_is_repeat_shard_skip() -> None:
    base = torch.utils.data.BatchSampler(range(6), 1, False)
    adapted = det_torch.adapt_batch_sampler(base, repeat=True, skip=2, num_replicas=2, rank=1)
    assert isinstance(adapted, samplers.SkipBatchSampler)
    assert isinstance(adapted.batch_sampler, samplers.DistributedBatchSampler)
    assert isinstance(adapted.batch_sampler.batch_sampler, samplers.RepeatBatchSampler)
    assert len(adapted) == 3
    assert list(itertools.islice(adapted, 3)) == [[5], [1], [3]]
    assert det_torch.adapt_batch_sampler(base) is base


@pytest.mark.parametrize("shuffle", [False, True])
def test_skipped_batches_never_reach_the_dataset(shuffle: bool) -> None:
    ds = IndexDataset(12)
    loader = det_torch.DataLoader(ds, batch_size=3, shuffle=shuffle)
    straight = _take(loader.get_data_loader(repeat=True, num_replicas=2, rank=1, seed=5), 6)
    ds.loaded.clear()
    resumed = _take(loader.get_data_loader(repeat=True, skip=4, num_replicas=2, rank=1, seed=5), 2)
    assert resumed == straight[4:]
    assert sorted(ds.loaded) == sorted(itertools.chain.from_iterable(resumed))
    assert len(loader.get_data_loader(repeat=True, skip=4, num_replicas=2, rank=1)) == 2


# Ways a user can make shuffling reproducible, each built afresh as a resumed process would.
_FACTORIES: dict[str, Callable[[int, int, bool], tuple[det_torch.DataLoader, int | None]]] = {
    "sequential": lambda n, bs, dl: (det_torch.DataLoader(IndexDataset(n), bs, drop_last=dl), 3),
    "shuffle+seed": lambda n, bs, dl: (
        det_torch.DataLoader(IndexDataset(n), bs, shuffle=True, drop_last=dl),
        17,
    ),
    "shuffle+generator": lambda n, bs, dl: (
        det_torch.DataLoader(
            IndexDataset(n),
            bs,
            shuffle=True,
            drop_last=dl,
            generator=torch.Generator().manual_seed(9),
        ),
        None,
    ),
    "reproducible_sampler": lambda n, bs, dl: (
        det_torch.DataLoader(
            IndexDataset(n),
            bs,
            sampler=samplers.ReproducibleShuffleSampler(range(n), 4),  # type: ignore[arg-type]
            drop_last=dl,
        ),
        None,
    ),
}


@given(
    kind=st.sampled_from(sorted(_FACTORIES)),
    n=st.integers(1, 13),
    batch_size=st.integers(1, 4),
    drop_last=st.booleans(),
    num_replicas=st.integers(1, 3),
    data=st.data(),
)
@settings(max_examples=120, deadline=None)
def test_resume_at_any_batch_equals_the_tail_of_a_straight_run(
    kind: str, n: int, batch_size: int, drop_last: bool, num_replicas: int, data: st.DataObject
) -> None:
    if drop_last and n < batch_size:
        n = batch_size  # an epoch with no batch at all would repeat forever without yielding
    rank = data.draw(st.integers(0, num_replicas - 1), label="rank")
    total = 3 * (n // batch_size + 1) + 2  # several epochs
    skip = data.draw(st.integers(0, total), label="skip")
    loader, seed = _FACTORIES[kind](n, batch_size, drop_last)
    straight = _take(loader.get_data_loader(True, 0, num_replicas, rank, seed=seed), total + 3)
    loader, seed = _FACTORIES[kind](n, batch_size, drop_last)
    resumed = _take(loader.get_data_loader(True, skip, num_replicas, rank, seed=seed), 3)
    assert resumed == straight[skip : skip + 3]


def test_seeded_shuffle_differs_per_epoch_and_per_seed() -> None:
    loader = det_torch.DataLoader(IndexDataset(20), batch_size=20, shuffle=True)
    epochs = _take(loader.get_data_loader(repeat=True, seed=1), 3)
    assert all(sorted(e) == list(range(20)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert _take(loader.get_data_loader(repeat=True, seed=2), 1) != epochs[:1]
    assert _take(loader.get_data_loader(repeat=True, seed=1), 3) == epochs


def test_seeded_loader_leaves_the_global_torch_rng_alone() -> None:
    loader = det_torch.DataLoader(IndexDataset(9), batch_size=2, shuffle=True)
    before = torch.random.get_rng_state()
    _take(loader.get_data_loader(repeat=True, seed=3), 20)
    assert torch.equal(before, torch.random.get_rng_state())


def test_unseeded_shuffle_draws_from_the_global_rng_as_in_0_37() -> None:
    loader = det_torch.DataLoader(IndexDataset(9), batch_size=9, shuffle=True)
    torch.manual_seed(0)
    first = _take(loader.get_data_loader(repeat=True), 2)
    torch.manual_seed(0)
    assert _take(loader.get_data_loader(repeat=True), 2) == first
    before = torch.random.get_rng_state()
    _take(loader.get_data_loader(repeat=True), 2)
    assert not torch.equal(before, torch.random.get_rng_state())


def _augmented(
    num_workers: int, skip: int, num_replicas: int, rank: int, n: int
) -> list[list[list[float]]]:
    loader = det_torch.DataLoader(
        AugmentingDataset(), batch_size=3, shuffle=True, num_workers=num_workers
    )
    torch_loader = loader.get_data_loader(True, skip, num_replicas, rank, seed=123)
    return [b.tolist() for b in itertools.islice(torch_loader, n)]


def test_worker_augmentation_resumes_exactly() -> None:
    """With 2 workers, random draws in __getitem__ depend only on (seed, epoch, index)."""
    straight = _augmented(num_workers=2, skip=0, num_replicas=1, rank=0, n=10)  # 2.5 epochs
    assert _augmented(num_workers=2, skip=5, num_replicas=1, rank=0, n=5) == straight[5:]
    # The same sample in the same epoch gets the same draws on any worker count or rank.
    assert _augmented(num_workers=1, skip=0, num_replicas=1, rank=0, n=10) == straight
    assert _augmented(num_workers=2, skip=1, num_replicas=2, rank=1, n=3) == straight[3:9:2]
    # ...and different draws in different epochs.
    by_epoch: dict[int, list[list[float]]] = {}
    for batch_idx, batch in enumerate(straight[:8]):
        for row in batch:
            by_epoch.setdefault(batch_idx // 4, []).append(row)
    first = {int(r[0]): r[1:] for r in by_epoch[0]}
    second = {int(r[0]): r[1:] for r in by_epoch[1]}
    assert sorted(first) == sorted(second) == list(range(10))
    assert all(first[i] != second[i] for i in range(10))


def test_dataset_repro_warning_names_the_type_and_the_fix() -> None:
    msg = _data._dataset_repro_warning(
        "build_training_data_loader",
        torch.utils.data.DataLoader([1]),  # type: ignore[arg-type]
    )
    assert "build_training_data_loader()" in msg and "DataLoader" in msg
    assert "context.experimental.disable_dataset_reproducibility_checks()" in msg
    ds_msg = _data._dataset_repro_warning("f", object(), is_deepspeed_trial=True)
    assert "context.disable_dataset_reproducibility_checks()" in ds_msg
