"""Seeded data order and per-sample seeds: the parts of exact resume that live in data loading.

Two streams of randomness in data loading decide whether a resumed run sees the same data:

* **the shuffle**: with a seed, epoch ``e``'s permutation is a pure function of ``(seed, e)``
  (:class:`_EpochSeededRandomSampler`), instead of a draw from the global torch RNG at whatever
  moment the epoch happens to start;
* **random augmentation in ``__getitem__``** inside worker processes: torch seeds each worker once
  (``base_seed + worker_id``) and deals batches to workers round-robin, so after a resume that
  skips ``S`` batches every sample lands on a different worker at a different point of its
  stream. With a seed, each sample is instead loaded right after seeding ``random``, ``numpy``
  and torch's CPU generator from ``(seed, epoch, index)`` (:class:`_SampleSeededDataset`), so the
  augmentation of a sample no longer depends on the worker, the rank, the batch size or where the
  run was resumed.

``epoch`` here is the pass number over the whole (unsharded) dataset: batch samplers are tagged
by :class:`_EpochTaggedBatchSampler` *inside* the repeat, so a rank and a resumed run count
passes exactly as an uninterrupted single-rank run does.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch
import torch.utils.data

_MASK64 = (1 << 64) - 1
# Keeps the shuffle's seeds apart from the per-sample seeds derived from the same trial seed.
_SHUFFLE_DOMAIN = 0x5348_5546_464C_4531


def _splitmix64(x: int) -> int:
    x = (x + 0x9E37_79B9_7F4A_7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64
    return x ^ (x >> 31)


def _key_to_int(key: Any) -> int:
    if isinstance(key, (int, np.integer)):
        return int(key) & _MASK64
    # Python's hash() of str is salted per process; a resumed run needs a stable value.
    return zlib.crc32(repr(key).encode())


def sample_seed(seed: int, epoch: int, index: Any) -> int:
    """The 63-bit seed for loading sample ``index`` in pass ``epoch`` of a run seeded ``seed``.

    A pure function of its arguments (no process state), so every rank, worker and resumed run
    derives the same value. Non-integer keys are hashed through their ``repr``.
    """
    h = _splitmix64(seed & _MASK64)
    h = _splitmix64(h ^ (epoch & _MASK64))
    h = _splitmix64(h ^ _key_to_int(index))
    return h >> 1


def shuffle_seed(seed: int, epoch: int) -> int:
    """The 63-bit seed of epoch ``epoch``'s permutation for a loader seeded ``seed``."""
    h = _splitmix64((seed ^ _SHUFFLE_DOMAIN) & _MASK64)
    return _splitmix64(h ^ (epoch & _MASK64)) >> 1


def _seed_process_rngs(seed: int) -> None:
    random.seed(seed)
    np.random.seed((seed & 0xFFFF_FFFF, seed >> 32))
    # CPU generator only: CUDA streams belong to the training process, not to data loading.
    torch.random.default_generator.manual_seed(seed)


class _EpochSeededRandomSampler(torch.utils.data.Sampler):
    """A ``RandomSampler`` whose ``k``-th pass is ``randperm`` seeded from ``(seed, k)``.

    Iterating never touches the global torch RNG, and the ``k``-th pass is the same whatever
    happened before it, so skipping ``k`` passes on resume replays them exactly.
    """

    def __init__(self, data_source: Sized, seed: int) -> None:
        self._data_source = data_source
        self._seed = seed
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._data_source)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(shuffle_seed(self._seed, self._epoch))
        self._epoch += 1
        return iter(torch.randperm(len(self._data_source), generator=generator).tolist())


class _EpochBatch(list[Any]):
    """A batch of indices that remembers which pass over the dataset it came from."""

    __slots__ = ("epoch",)

    def __init__(self, indices: Any, epoch: int) -> None:
        super().__init__(indices)
        self.epoch = epoch

    def __reduce__(self) -> tuple[Any, ...]:
        # Batches travel to worker processes through pickle.
        return (_EpochBatch, (list(self), self.epoch))


class _EpochTaggedBatchSampler(torch.utils.data.BatchSampler):
    """Tags every batch with the number of the pass it belongs to (0 for the first ``iter()``)."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self._epoch = 0

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self._epoch
        self._epoch += 1
        for batch in self.batch_sampler:
            yield _EpochBatch(batch, epoch)


class _SampleSeededDataset(torch.utils.data.Dataset):
    """Loads each sample right after seeding the process's RNGs from ``(seed, epoch, index)``.

    Meant for worker processes only (``num_workers > 0``): it reseeds the RNGs of the process it
    runs in and does not restore them. A dataset with its own batched ``__getitems__`` is called
    once per batch, seeded from the batch's first index.
    """

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        _seed_process_rngs(sample_seed(self.seed, 0, index))
        return self.dataset[index]

    def __getitems__(self, batch: list[Any]) -> list[Any]:
        epoch = getattr(batch, "epoch", 0)
        batched = getattr(self.dataset, "__getitems__", None)
        if batched:
            if batch:
                _seed_process_rngs(sample_seed(self.seed, epoch, batch[0]))
            return list(batched(list(batch)))
        samples = []
        for index in batch:
            _seed_process_rngs(sample_seed(self.seed, epoch, index))
            samples.append(self.dataset[index])
        return samples

    def __getattr__(self, name: str) -> Any:
        # Lets user code reach attributes of its own dataset through loader.dataset.
        if name in ("dataset", "seed") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)
