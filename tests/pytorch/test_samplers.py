"""determined.pytorch.samplers: repeat, shard, skip and reproducible shuffles
(docs/reference/harness.md §14)."""

from __future__ import annotations

import itertools

import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.pytorch import samplers


def _batches(
    n_samples: int, batch_size: int, drop_last: bool = False
) -> torch.utils.data.BatchSampler:
    seq = torch.utils.data.SequentialSampler(range(n_samples))
    return torch.utils.data.BatchSampler(seq, batch_size, drop_last)


def _take(it: object, n: int) -> list:
    return list(itertools.islice(iter(it), n))  # type: ignore[call-overload]


def test_public_names() -> None:
    for name in samplers.__all__:
        assert isinstance(getattr(samplers, name), type)
    assert sorted(samplers.__all__) == samplers.__all__


def test_repeat_batch_sampler_is_infinite_and_reports_one_epoch() -> None:
    base = _batches(5, 2)  # [0,1] [2,3] [4]
    rep = samplers.RepeatBatchSampler(base)
    assert len(rep) == 3
    assert _take(rep, 7) == [[0, 1], [2, 3], [4], [0, 1], [2, 3], [4], [0, 1]]


def test_repeat_sampler_is_infinite_and_reports_one_epoch() -> None:
    rep = samplers.RepeatSampler(torch.utils.data.SequentialSampler(range(3)))
    assert len(rep) == 3
    assert _take(rep, 8) == [0, 1, 2, 0, 1, 2, 0, 1]


def test_sharding_table_seven_batches_three_ranks() -> None:
    base = _batches(7, 1)
    got = {r: list(samplers.DistributedBatchSampler(base, 3, r)) for r in range(3)}
    assert got == {0: [[0], [3], [6]], 1: [[1], [4]], 2: [[2], [5]]}
    assert [len(samplers.DistributedBatchSampler(base, 3, r)) for r in range(3)] == [3, 2, 2]
    # Over a repeated stream the round-robin continues across the epoch boundary.
    rep = samplers.RepeatBatchSampler(base)
    assert _take(samplers.DistributedBatchSampler(rep, 3, 1), 5) == [[1], [4], [0], [3], [6]]
    assert _take(samplers.DistributedBatchSampler(rep, 3, 2), 5) == [[2], [5], [1], [4], [0]]


@given(
    n_batches=st.integers(0, 40),
    num_workers=st.integers(1, 6),
    data=st.data(),
)
def test_distributed_batch_sampler_shards_round_robin(
    n_batches: int, num_workers: int, data: st.DataObject
) -> None:
    base = _batches(n_batches, 1)
    everything = list(base)
    shards = []
    for rank in range(num_workers):
        shard = samplers.DistributedBatchSampler(base, num_workers, rank)
        got = list(shard)
        assert got == everything[rank::num_workers]
        assert len(shard) == n_batches // num_workers + (n_batches % num_workers > rank)
        assert len(shard) == len(got)
        shards.append(got)
    # The shards partition the global stream.
    assert sorted(itertools.chain.from_iterable(shards)) == sorted(everything)
    rank = data.draw(st.integers(0, num_workers - 1))
    per_sample = samplers.DistributedSampler(range(n_batches), num_workers, rank)  # type: ignore[arg-type]
    assert list(per_sample) == list(range(n_batches))[rank::num_workers]
    assert len(per_sample) == len(list(per_sample))


@pytest.mark.parametrize(("num_workers", "rank"), [(2, -1), (2, 2), (3, 7), (0, 0), (-1, 0)])
def test_distributed_samplers_reject_bad_rank(num_workers: int, rank: int) -> None:
    with pytest.raises(ValueError, match="rank|num_workers"):
        samplers.DistributedBatchSampler(_batches(4, 1), num_workers, rank)
    with pytest.raises(ValueError, match="rank|num_workers"):
        samplers.DistributedSampler(torch.utils.data.SequentialSampler(range(4)), num_workers, rank)


@given(n_batches=st.integers(0, 30), skip=st.integers(0, 40))
def test_skip_batch_sampler_drops_a_prefix_and_keeps_len(n_batches: int, skip: int) -> None:
    base = _batches(n_batches, 1)
    skipped = samplers.SkipBatchSampler(base, skip)
    assert len(skipped) == n_batches
    assert list(skipped) == list(base)[skip:]
    per_sample = samplers.SkipSampler(torch.utils.data.SequentialSampler(range(n_batches)), skip)
    assert len(per_sample) == n_batches
    assert list(per_sample) == list(range(n_batches))[skip:]


def test_skip_over_repeat_skips_once_not_every_epoch() -> None:
    rep = samplers.RepeatBatchSampler(_batches(3, 1))
    assert _take(samplers.SkipBatchSampler(rep, 2), 5) == [[2], [0], [1], [2], [0]]


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 30))
@settings(max_examples=50)
def test_reproducible_shuffle_sampler(seed: int, n: int) -> None:
    def epochs(sampler: samplers.ReproducibleShuffleSampler) -> list[list[int]]:
        return [list(sampler) for _ in range(4)]

    base = torch.utils.data.SequentialSampler(range(n))
    first = epochs(samplers.ReproducibleShuffleSampler(base, seed))
    again = epochs(samplers.ReproducibleShuffleSampler(base, seed))
    assert first == again
    for epoch in first:
        assert sorted(epoch) == list(range(n))
    assert len(samplers.ReproducibleShuffleSampler(base, seed)) == n


def test_reproducible_shuffle_epochs_differ() -> None:
    base = torch.utils.data.SequentialSampler(range(50))
    sampler = samplers.ReproducibleShuffleSampler(base, 3)
    epochs = [list(sampler) for _ in range(5)]
    assert all(a != b for a, b in itertools.combinations(epochs, 2))
    other = samplers.ReproducibleShuffleSampler(base, 4)
    assert list(other) != epochs[0]


def test_reproducible_shuffle_batch_sampler_shuffles_batch_order() -> None:
    base = _batches(40, 4)
    sampler = samplers.ReproducibleShuffleBatchSampler(base, 11)
    epochs = [list(sampler) for _ in range(3)]
    again = samplers.ReproducibleShuffleBatchSampler(base, 11)
    assert [list(again) for _ in range(3)] == epochs
    assert len(sampler) == 10
    for epoch in epochs:
        assert sorted(epoch) == list(base)  # the batches keep their contents
    assert epochs[0] != epochs[1] != epochs[2]


def test_unsized_sampler_len_is_a_clear_type_error() -> None:
    def gen():  # type: ignore[no-untyped-def]
        yield [0]

    with pytest.raises(TypeError, match="no __len__"):
        len(samplers.RepeatBatchSampler(gen()))
