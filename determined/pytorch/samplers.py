"""Composable samplers for repeating, sharding, skipping and reproducibly shuffling data.

These are the building blocks :meth:`determined.pytorch.DataLoader.get_data_loader` chains
together (Repeat -> Distributed -> Skip), public as in Determined 0.37 so that users who build
their own ``torch.utils.data.DataLoader`` can apply the same steps by hand.

Each class has a per-sample form (wrapping a ``Sampler`` of indices) and a per-batch form
(wrapping a ``BatchSampler`` of index lists). The order to compose them is always:

1. shuffle (``ReproducibleShuffle*``): it must see a finite sampler;
2. repeat (``Repeat*``): makes the stream infinite;
3. shard (``Distributed*``): rank ``r`` of ``n`` keeps items ``r, r+n, r+2n, ...``;
4. skip (``Skip*``): drops the first items of *this rank's* stream, once, on resume.

None of them loads data: they pass indices around, so skipping is as cheap as iterating indices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch.utils.data

__all__ = [
    "DistributedBatchSampler",
    "DistributedSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "SkipSampler",
]


def _len(sampler: Any) -> int:
    if not isinstance(sampler, Sized):
        raise TypeError(
            f"{type(sampler).__name__} has no __len__; the samplers in "
            "determined.pytorch.samplers need a sampler of known length to wrap"
        )
    return len(sampler)


def _check_shard(num_workers: int, rank: int, name: str = "num_workers") -> None:
    # Shared with _data.adapt_batch_sampler, which validates before wrapping anything.
    if num_workers < 1:
        raise ValueError(
            f"{name} is {num_workers}, but must be at least 1 (the number of ranks that share "
            "the data)"
        )
    if rank < 0 or rank >= num_workers:
        raise ValueError(
            f"rank is {rank}, but must be in [0, {num_workers - 1}] for {name}={num_workers}"
        )


def _shard(items: Iterator[Any], num_workers: int, rank: int) -> Iterator[Any]:
    for i, item in enumerate(items):
        if i % num_workers == rank:
            yield item


def _skip(items: Iterator[Any], skip: int) -> Iterator[Any]:
    # Advancing the iterator is the whole point: it replays the wrapped samplers' state (epoch
    # counters, shuffles) exactly as an uninterrupted run did, without touching the dataset.
    for _ in range(skip):
        try:
            next(items)
        except StopIteration:
            return
    yield from items


class RepeatSampler(torch.utils.data.Sampler):
    """Yields the indices of ``sampler`` over and over, forever.

    ``len()`` is the length of one pass of the wrapped sampler, so epoch arithmetic works.
    """

    def __init__(self, sampler: torch.utils.data.Sampler) -> None:
        self._sampler = sampler

    def __len__(self) -> int:
        return _len(self._sampler)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self._sampler


class RepeatBatchSampler(torch.utils.data.BatchSampler):
    """Yields the batches of ``batch_sampler`` over and over, forever.

    Every pass calls ``iter()`` on the wrapped batch sampler again, so a shuffling sampler
    reshuffles each epoch. ``len()`` is the length of one pass.
    """

    def __init__(self, batch_sampler: torch.utils.data.BatchSampler) -> None:
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return _len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            yield from self.batch_sampler


class DistributedSampler(torch.utils.data.Sampler):
    """Keeps every ``num_workers``-th index of ``sampler``, starting at ``rank``.

    Unlike ``torch.utils.data.DistributedSampler`` this is a link in a chain: it neither
    shuffles nor pads. ``len()`` is ``L // n + (L % n > rank)``, so ranks can differ by one.

    Raises:
        ValueError: ``num_workers < 1`` or ``rank`` outside ``[0, num_workers)``.
    """

    def __init__(self, sampler: torch.utils.data.Sampler, num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self._sampler = sampler
        self._num_workers = num_workers
        self._rank = rank

    def __len__(self) -> int:
        full, extra = divmod(_len(self._sampler), self._num_workers)
        return full + int(extra > self._rank)

    def __iter__(self) -> Iterator[Any]:
        return _shard(iter(self._sampler), self._num_workers, self._rank)


class DistributedBatchSampler(torch.utils.data.BatchSampler):
    """Keeps every ``num_workers``-th batch of ``batch_sampler``, starting at ``rank``.

    Rank ``r`` of ``n`` receives global batches ``r, r+n, r+2n, ...``. Sharding whole batches
    (rather than indices) keeps each batch's contents identical whatever the number of ranks.
    ``len()`` is ``L // n + (L % n > rank)``: on a finite (validation) stream the ranks can
    differ by one batch; the training stream is repeated, so they never run dry.

    Raises:
        ValueError: ``num_workers < 1`` or ``rank`` outside ``[0, num_workers)``.
    """

    def __init__(
        self, batch_sampler: torch.utils.data.BatchSampler, num_workers: int, rank: int
    ) -> None:
        _check_shard(num_workers, rank)
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.rank = rank

    def __len__(self) -> int:
        full, extra = divmod(_len(self.batch_sampler), self.num_workers)
        return full + int(extra > self.rank)

    def __iter__(self) -> Iterator[list[int]]:
        return _shard(iter(self.batch_sampler), self.num_workers, self.rank)


class SkipSampler(torch.utils.data.Sampler):
    """Drops the first ``skip`` indices of ``sampler`` and yields the rest.

    Prefer :class:`SkipBatchSampler`: Determined counts batches, not records, so skipping
    records resumes exactly only when every batch has the same size. ``len()`` is the wrapped
    sampler's length (the skip is meant to sit on top of a repeated stream).
    """

    def __init__(self, sampler: torch.utils.data.Sampler, skip: int) -> None:
        self._sampler = sampler
        self._skip = skip

    def __len__(self) -> int:
        return _len(self._sampler)

    def __iter__(self) -> Iterator[Any]:
        return _skip(iter(self._sampler), self._skip)


class SkipBatchSampler(torch.utils.data.BatchSampler):
    """Drops the first ``skip`` batches of ``batch_sampler`` and yields the rest.

    Used on resume: the skipped batches are index lists only, so the dataset is never asked for
    them. Apply it after repeating and sharding, so that ``skip`` counts this rank's batches and
    the skip happens once rather than every epoch. ``len()`` is the wrapped sampler's length.
    """

    def __init__(self, batch_sampler: torch.utils.data.BatchSampler, skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __len__(self) -> int:
        return _len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        return _skip(iter(self.batch_sampler), self.skip)


class ReproducibleShuffleSampler(torch.utils.data.Sampler):
    """Shuffles the indices of a finite ``sampler`` with a ``numpy`` RandomState seeded once.

    Each ``iter()`` (each epoch) draws a new permutation from the same RandomState, so epochs
    differ from one another while two instances built with the same seed yield the same
    sequence of epochs. Wrap it in a repeat, never the other way round (a shuffle of an
    infinite stream never returns).
    """

    def __init__(self, sampler: torch.utils.data.Sampler, seed: int) -> None:
        self._sampler = sampler
        self._rng = np.random.RandomState(seed)

    def __len__(self) -> int:
        return _len(self._sampler)

    def __iter__(self) -> Iterator[Any]:
        items = list(self._sampler)
        self._rng.shuffle(items)
        return iter(items)


class ReproducibleShuffleBatchSampler(torch.utils.data.BatchSampler):
    """Shuffles the order of the batches of a finite ``batch_sampler``, seeded once.

    Same rules as :class:`ReproducibleShuffleSampler`, but only the order of batches changes,
    not their contents; prefer shuffling indices where you can.
    """

    def __init__(self, batch_sampler: torch.utils.data.BatchSampler, seed: int) -> None:
        self._batch_sampler = batch_sampler
        self._rng = np.random.RandomState(seed)

    def __len__(self) -> int:
        return _len(self._batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(self._batch_sampler)
        self._rng.shuffle(batches)
        return iter(batches)
