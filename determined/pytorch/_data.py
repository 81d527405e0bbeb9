"""``det.pytorch.DataLoader``: a torch DataLoader whose batch order Determined can repeat, shard
and resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.data
from torch.utils.data._utils import collate

from determined.pytorch import _sample_seed, samplers


def _dataset_repro_warning(fn: str, data_obj: Any, is_deepspeed_trial: bool = False) -> str:
    """The message for a trial whose ``fn`` returned something other than our DataLoader."""
    disable = (
        "context.disable_dataset_reproducibility_checks()"
        if is_deepspeed_trial
        else "context.experimental.disable_dataset_reproducibility_checks()"
    )
    return (
        f"{fn}() returned a {type(data_obj).__name__}, not a determined.pytorch.DataLoader. "
        "For map-style datasets det.pytorch.DataLoader takes the same arguments as "
        "torch.utils.data.DataLoader and lets Determined shard, repeat and resume your data "
        "exactly, which dataset reproducibility depends on; please switch to it. If you cannot "
        f"(for example with an IterableDataset), disable this check by calling {disable} in "
        "your trial's __init__() and handle sharding, repeating and skipping yourself."
    )


def _validate_args(
    dataset: Any,
    batch_size: int | None,
    shuffle: bool,
    sampler: Any,
    batch_sampler: Any,
    num_workers: int,
    drop_last: bool,
    timeout: float,
    prefetch_factor: int | None,
    persistent_workers: bool,
) -> None:
    if isinstance(dataset, torch.utils.data.IterableDataset):
        raise ValueError(
            "det.pytorch.DataLoader does not accept an IterableDataset: Determined cannot shard, "
            "repeat or skip a stream it cannot index. Use a map-style Dataset, or return a plain "
            "torch.utils.data.DataLoader and disable the reproducibility checks with "
            "context.experimental.disable_dataset_reproducibility_checks()."
        )
    if batch_sampler is None and batch_size is None:
        raise ValueError(
            "det.pytorch.DataLoader needs batches: pass batch_size (an int) or a batch_sampler; "
            "batch_size=None without a batch_sampler is not supported."
        )
    if num_workers < 0:
        raise ValueError(f"num_workers is {num_workers}; use 0 to load data in the main process.")
    if timeout < 0:
        raise ValueError(f"timeout is {timeout}, but must be non-negative.")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor needs num_workers > 0 (it counts batches per worker).")
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError(f"prefetch_factor is {prefetch_factor}, but must be non-negative.")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers=True needs num_workers > 0.")
    if sampler is not None and shuffle:
        raise ValueError("sampler and shuffle=True are mutually exclusive; shuffle in the sampler.")
    if batch_sampler is not None and (
        batch_size != 1 or shuffle or sampler is not None or drop_last
    ):
        raise ValueError(
            "batch_sampler is mutually exclusive with batch_size, shuffle, sampler and drop_last; "
            "leave those at their defaults when you pass a batch_sampler."
        )


class DataLoader:
    """A drop-in for ``torch.utils.data.DataLoader`` over a map-style dataset.

    Takes the same arguments and defaults as torch's loader, and rejects the same invalid
    combinations (``ValueError``), plus an ``IterableDataset`` and ``batch_size=None`` without a
    ``batch_sampler``. It builds no torch loader itself: the training loop calls
    :meth:`get_data_loader` with the repeat/skip/shard settings of the current rank. Iterating it
    directly (``for batch in loader``) behaves like a plain torch loader, for use outside
    Determined.

    Attributes:
        dataset, batch_size, drop_last, sampler, batch_sampler, collate_fn, num_workers,
        pin_memory, timeout, worker_init_fn, multiprocessing_context, generator,
        prefetch_factor, persistent_workers: as resolved from the arguments, with the defaults
        torch would choose (a ``RandomSampler`` when shuffled, else a ``SequentialSampler``,
        wrapped in a ``BatchSampler``).
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset,
        batch_size: int | None = 1,
        shuffle: bool = False,
        sampler: torch.utils.data.Sampler | None = None,
        batch_sampler: torch.utils.data.BatchSampler | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ) -> None:
        _validate_args(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, drop_last,
            timeout, prefetch_factor, persistent_workers,
        )  # fmt: skip
        # Shuffling with our default sampler is the case a seed can make exactly resumable.
        self._default_shuffle = shuffle and sampler is None and generator is None
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        if sampler is None:
            sampler = (
                torch.utils.data.RandomSampler(dataset, generator=generator)  # type: ignore[arg-type]
                if shuffle
                else torch.utils.data.SequentialSampler(dataset)  # type: ignore[arg-type]
            )
        if batch_sampler is None and batch_size is not None:
            batch_sampler = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn if collate_fn is not None else collate.default_collate
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = 2 if num_workers > 0 and prefetch_factor is None else prefetch_factor
        self.persistent_workers = persistent_workers

    def get_data_loader(
        self,
        repeat: bool = False,
        skip: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        *,
        seed: int | None = None,
    ) -> torch.utils.data.DataLoader:
        """Build the torch DataLoader one rank iterates.

        Called by the training loop on every rank: for training with ``repeat=True``,
        ``skip=<batches this rank already trained>`` and the rank's place in the job; for
        validation with ``repeat=False, skip=0``. The batch sampler is wrapped as Repeat (if
        ``repeat``), then Distributed (if ``num_replicas > 1``), then Skip (if ``skip > 0``);
        skipped batches are index lists only and never reach the dataset.

        Args:
            repeat: loop over the data forever (``len()`` stays one epoch).
            skip: batches of this rank's stream to drop before the first one returned.
            num_replicas: ranks sharing the data; rank ``r`` gets global batches
                ``r, r+n, r+2n, ...``.
            rank: this rank, in ``[0, num_replicas)``.
            seed: not in Determined 0.37. With a seed (the training loop always passes the
                run's data seed: docs/pytorch/data.md), a shuffle built from
                ``shuffle=True`` draws epoch ``e``'s permutation from
                ``(seed, e)`` and never touches the global torch RNG, and worker processes load
                each sample right after seeding ``random``, ``numpy`` and torch's CPU generator
                from ``(seed, epoch, index)``. Both make a resumed run see the same samples with
                the same augmentation as an uninterrupted one. Without a seed the loader behaves
                exactly as Determined 0.37's.

        Raises:
            ValueError: ``num_replicas < 1``, ``rank`` outside ``[0, num_replicas)`` or a
                negative ``skip``.
        """
        dataset: Any = self.dataset
        batch_sampler: Any = self.batch_sampler
        generator = self.generator
        if seed is not None:
            if self._default_shuffle:
                shuffled = _sample_seed._EpochSeededRandomSampler(dataset, seed)
                batch_sampler = torch.utils.data.BatchSampler(
                    shuffled, self.batch_size or 1, self.drop_last
                )
            if self.num_workers > 0:
                batch_sampler = _sample_seed._EpochTaggedBatchSampler(batch_sampler)
                dataset = _sample_seed._SampleSeededDataset(dataset, seed)
            if generator is None:
                # torch draws each iterator's worker base seed from this, not the global RNG.
                generator = torch.Generator()
                generator.manual_seed(_sample_seed.shuffle_seed(seed, -1))
        batch_sampler = adapt_batch_sampler(
            batch_sampler, repeat=repeat, skip=skip, num_replicas=num_replicas, rank=rank
        )
        return torch.utils.data.DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            num_workers=self.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=self.pin_memory,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=generator,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
        )

    def __iter__(self) -> Iterator[Any]:
        """Iterate once over all batches, like a plain torch DataLoader (no repeat or shard)."""
        return iter(self.get_data_loader())

    def __len__(self) -> int:
        """Number of batches in one epoch, before sharding."""
        return len(self.batch_sampler)  # type: ignore[arg-type]


def adapt_batch_sampler(
    batch_sampler: torch.utils.data.BatchSampler,
    repeat: bool = False,
    skip: int = 0,
    num_replicas: int = 1,
    rank: int = 0,
) -> torch.utils.data.BatchSampler:
    """Wrap ``batch_sampler`` for one rank: Repeat, then Distributed, then Skip.

    The order matters: sharding a repeated stream deals batches round-robin across epoch
    boundaries, so no rank ever runs dry; skipping last makes ``skip`` count this rank's
    batches, which is what the trainer records as ``steps_completed``.

    Raises:
        ValueError: ``num_replicas < 1``, ``rank`` outside ``[0, num_replicas)``, or a negative
            ``skip``. (Determined 0.37 checks the rank only when ``num_replicas > 1``.)
    """
    samplers._check_shard(num_replicas, rank, name="num_replicas")
    if skip < 0:
        raise ValueError(f"skip is {skip}, but must be the non-negative number of batches to drop.")
    if repeat:
        batch_sampler = samplers.RepeatBatchSampler(batch_sampler)
    if num_replicas > 1:
        batch_sampler = samplers.DistributedBatchSampler(batch_sampler, num_replicas, rank)
    if skip > 0:
        batch_sampler = samplers.SkipBatchSampler(batch_sampler, skip)
    return batch_sampler
