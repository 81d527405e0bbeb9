"""The training loop: one controller, read top to bottom.

    for each searcher operation (absolute length; one of max_length when the trial decides
    its own length: locally, and on a cluster in 0.38 style):
        train batches until a boundary fires (op length, validation, checkpoint, reporting)
        report training metrics                       <- every boundary
        handle the fired boundaries in order; after each, stop if preempted or asked to
    end of operation: validate if not current, checkpoint if not current

When to validate, checkpoint and report is decided by the pure ``_periods.due``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import enum
import inspect
import logging
import pathlib
import secrets
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data.dataloader import _BaseDataLoaderIter

import determined as det
from determined import core, errors
from determined.pytorch import _checkpoint_io, _metrics, _staging, _state
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._context import PyTorchTrialContext
from determined.pytorch._data import DataLoader
from determined.pytorch._periods import Boundary, Periods, due, length_reached, next_stop
from determined.pytorch._trial import PyTorchTrial, _check_trial
from determined.pytorch._units import Batch, Epoch, TrainUnit
from determined.pytorch._validation import Validator

logger = logging.getLogger("determined.pytorch")


class ExitReason(enum.Enum):
    COMPLETED = "completed"  # every searcher operation is done
    STOPPED = "stopped"  # preempted, or context.set_stop_requested(True)


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """Everything the loop needs to know, resolved once by the Trainer."""

    periods: Periods
    checkpoint_policy: str = "best"  # "best" | "all" | "none"
    max_length: TrainUnit | None = None  # the trial's own length: no searcher operations
    on_cluster: bool = False  # the master keeps the experiment's best; progress goes there
    length_metrics: bool = False  # 0.38 style: metrics gain "batches" and "epochs" keys
    searcher_unit: core.Unit | None = None  # on-cluster: the unit of op.length
    global_batch_size: int | None = None
    searcher_metric: str | None = None
    smaller_is_better: bool = True
    test_mode: bool = False
    step_zero_validation: bool = False
    latest_checkpoint: str | None = None
    trial_id: int = 0
    data_seed: int | None = None
    average_training_metrics: bool = True
    profiling_enabled: bool = False
    progress_bar: bool = False  # tqdm on the chief, for interactive local runs
    load_data: dict[str, Any] = dataclasses.field(default_factory=dict)
    code_dir: pathlib.Path | None = None
    code_subdir: str = ""  # where code_dir goes under code/ (the trial module's package path)
    # Stage to host memory, write in the background; None: unless a callback has checkpoint
    # hooks the background would move (see _async_checkpoints).
    async_checkpoints: bool | None = None


class Controller:
    """Runs one trial to completion, to a stop, or until it raises. Every rank runs one."""

    def __init__(
        self, trial: PyTorchTrial, context: PyTorchTrialContext, settings: LoopSettings
    ) -> None:
        self.trial, self.context, self.settings = trial, context, settings
        self.setup = context._training_setup()  # modes are fixed from here on
        self.core: core.Context = self.setup.core
        self.dist = context.distributed
        self.chief = self.dist.get_rank() == 0
        self.by_batch = _check_trial(trial, context)
        self.callbacks = trial.build_callbacks()
        _warn_deprecated_hooks(self.callbacks)
        self.progress = _state.Progress(trial_id=settings.trial_id)
        self.validator = Validator(trial, self.setup, self.callbacks, settings, self.by_batch)
        self._chunk: list[dict[str, Any]] = []
        self._best: float | None = None
        self._last_completed: core.SearcherOperation | None = None
        self._bar: Any = None
        self._status: str | None = None
        self._writing = False  # a checkpoint is being written in the background
        # Host buffers asynchronous checkpoints stage into, kept between them (chief only).
        self._staging = _staging.HostStaging()
        self._sharded = _checkpoint_io.is_sharded(self.setup)
        self._async = _async_checkpoints(settings.async_checkpoints, self.callbacks, self._sharded)

    # ---- entry point -----------------------------------------------------------------------

    def run(self) -> ExitReason:
        with contextlib.ExitStack() as stack:
            for cb in self.callbacks.values():
                cb.on_trial_startup(
                    self.context.get_initial_batch(), self.settings.latest_checkpoint
                )
                stack.callback(cb.on_trial_shutdown)  # unwinds in reverse, even on error
            stack.callback(self._staging.close)  # after the last write was waited for
            self._setup(stack)
            try:
                reason = self._run_ops()
            except det.InvalidHP:
                self._checkpoint_if_needed()
                self._collect_background(block=True)
                raise
            self._collect_background(block=True)  # the end, or a preemption: wait for it
            return reason

    def _setup(self, stack: contextlib.ExitStack) -> None:
        # Loaders first (the reference order), then the checkpoint, then the iterator: the
        # restored counters decide how many batches the iterator skips, as indices only, and
        # the restored data seed the order and the workers' random numbers. The RNG state
        # comes last, as in 0.37: building an iterator of a plain torch loader draws from the
        # global torch RNG, and the first batch after a restore must see the random numbers
        # an uninterrupted run saw.
        train_loader = self.trial.build_training_data_loader()
        self.validator.set_loader(self.trial.build_validation_data_loader())
        rng = None
        if self.settings.latest_checkpoint is not None:
            rng = self._restore(self.settings.latest_checkpoint)
        self.progress.data_seed = self.validator.data_seed = self._data_seed()
        self._batches, epoch_len = self._training_batches(train_loader)
        stack.callback(self._drop_iterator)  # loader workers shut down with the iterator
        if rng is not None:
            _state.set_rng_state(rng)
        self.epoch_len = self.dist.broadcast(epoch_len if self.chief else None)
        if self.epoch_len < 1:
            raise ValueError(
                "build_training_data_loader() returned a loader with no batches on the chief; "
                "check the dataset size, batch_size and drop_last"
            )
        for cb in self.callbacks.values():
            cb.on_training_start()
        if self.settings.progress_bar and self.chief:
            self._bar = stack.enter_context(self._progress_bar())
        if self.setup.profiler is not None:
            stack.enter_context(self.setup.profiler)
        if self.settings.profiling_enabled:
            self.core.profiler.on()
            stack.callback(self.core.profiler.off)

    def _data_seed(self) -> int:
        """The seed of the data order and of the loader workers' random numbers: the trial
        seed (on a cluster) or experiment_seed; else the one a restored checkpoint of this run
        kept; else a fresh one, chosen by the chief. Never drawn from the global RNGs, whose
        state belongs to the user's code and is restored separately."""
        if self.settings.data_seed is not None:
            return self.settings.data_seed
        if self.progress.data_seed is not None:
            return self.progress.data_seed
        fresh = secrets.randbits(63) if self.chief else None
        return int(self.dist.broadcast(fresh))

    def _training_batches(self, loader: Any) -> tuple[Iterator[Any], int]:
        if isinstance(loader, DataLoader):
            torch_loader = loader.get_data_loader(
                repeat=True,
                skip=self.progress.batches_trained,
                num_replicas=self.dist.get_size(),
                rank=self.dist.get_rank(),
                seed=self.progress.data_seed,
            )
            return iter(torch_loader), len(torch_loader)
        self.validator.check_raw_loader(loader, "build_training_data_loader")
        epoch_len = len(loader) if hasattr(loader, "__len__") else sys.maxsize
        return _forever(loader), epoch_len

    def _drop_iterator(self) -> None:
        self._batches = iter(())

    def _progress_bar(self) -> Any:
        import tqdm

        length = self.settings.max_length
        total = None
        if length is not None and isinstance(length.value, int):
            per = self.epoch_len if isinstance(length, Epoch) else 1
            total = length.value * per
        return tqdm.tqdm(total=total, initial=self.progress.batches_trained, unit="batch")

    def _restore(self, storage_id: str) -> dict[str, Any] | None:
        """Restore everything but the RNG state, which is returned for the caller to set."""
        with self.core.checkpoint.restore_path(storage_id) as path:
            saved = _state.read_progress(path)
            same_trial = saved is not None and saved.trial_id == self.settings.trial_id
            rng = _checkpoint_io.restore(
                path, self.setup, self.callbacks, weights_only=not same_trial
            )
        if same_trial and saved is not None:
            self.progress = saved
        logger.info(f"restored {storage_id} at batch {self.progress.batches_trained}")
        return rng

    # ---- operations ------------------------------------------------------------------------

    def _ops(self) -> Iterator[tuple[TrainUnit, core.SearcherOperation | None]]:
        if self.settings.max_length is not None:
            yield self.settings.max_length, None
            return
        for op in self.core.searcher.operations():
            yield (
                TrainUnit._from_searcher_unit(
                    op.length, self.settings.searcher_unit, self.settings.global_batch_size
                ),
                op,
            )

    def _run_ops(self) -> ExitReason:
        fresh = self.progress.batches_trained == 0 and self.progress.last_val is None
        if self.settings.step_zero_validation and fresh and self._validate(None, None):
            self._checkpoint_if_needed()
        for length, op in self._ops():
            if self.settings.test_mode:
                length = Batch(self.progress.batches_trained + 1)
            if not self._train_for_op(length, op):
                return ExitReason.STOPPED
            self._validate_if_needed(length, op)
            if self.dist.broadcast(self.chief and op is not None and not self._done(op)):
                self._validate(length, op)  # validated before a restart: complete it now
            self._checkpoint_if_needed()
        return ExitReason.COMPLETED

    def _train_for_op(self, length: TrainUnit, op: core.SearcherOperation | None) -> bool:
        """Train until ``length``; False if the run must stop."""
        while not length_reached(length, self.progress.batches_trained, self.epoch_len):
            fired = self._train_chunk(length)
            self._report_training()
            self._collect_background(block=False)  # a background failure surfaces here
            progress_due = True  # once, when TRAIN and REPORT fire together
            for boundary in fired:
                if boundary in (Boundary.TRAIN, Boundary.REPORT):
                    if progress_due:
                        self._report_progress(length, op)
                    progress_due = False
                elif boundary == Boundary.VALIDATE:
                    self._validate_if_needed(length, op)
                elif boundary == Boundary.CHECKPOINT:
                    self._checkpoint_if_needed()
                if self._stop_requested():
                    self._checkpoint_if_needed()
                    return False
        return True

    # ---- training --------------------------------------------------------------------------

    def _train_chunk(self, length: TrainUnit) -> list[Boundary]:
        self._set_status("training")
        for m in self.setup.models:
            m.train()
        self.validator.reset_reducers(training=True)
        args = (self.epoch_len, length, self.settings.periods, self.settings.test_mode)
        while True:
            stop = next_stop(self.progress.batches_trained, *args)
            self._train_batches(stop)  # no boundary checks in between
            fired = due(stop - 1, *args)
            if fired:
                return fired

    def _train_batches(self, stop: int) -> None:
        """Train batches up to ``stop``: the per-batch path, so everything that does not change
        between two boundaries is looked up once, here, not once per batch."""
        ctx, setup, trial, epoch_len, progress = (
            self.context,
            self.setup,
            self.trial,
            self.epoch_len,
            self.progress,
        )
        next_batch = _next_batch(self._batches, profiling=setup.profiler is not None)
        record, batch_metrics = self._chunk.append, _metrics.batch_metrics
        move = setup.to_device if setup.auto_to_device else None
        # Automatic AMP updates the scaler here; with wrap_scaler alone, train_batch does.
        scaler = setup.scaler if setup.auto_amp else None
        schedulers, agg = setup.lr_schedulers, setup.aggregation_frequency
        epoch_hooks = [
            _epoch_start_hook(name, cb)
            for name, cb in self.callbacks.items()
            if _overrides(cb, "on_training_epoch_start")
        ]
        epoch_end_hooks = [
            cb for cb in self.callbacks.values() if _overrides(cb, "on_training_epoch_end")
        ]
        for idx in range(progress.batches_trained, stop):
            batch = next_batch()
            epoch_idx, in_epoch = divmod(idx, epoch_len)
            ctx._set_progress(idx, epoch_len)
            if in_epoch == 0:
                for hook in epoch_hooks:
                    hook(epoch_idx)
            if move is not None:
                batch = move(batch)
            if setup.auto_amp:
                with ctx.autocast():
                    out = trial.train_batch(batch=batch, epoch_idx=epoch_idx, batch_idx=idx)
            else:
                out = trial.train_batch(batch=batch, epoch_idx=epoch_idx, batch_idx=idx)
            if setup.profiler is not None:
                setup.profiler.step()
            if (schedulers or scaler is not None) and ctx._should_communicate_and_update():
                if scaler is not None:
                    scaler.update()
                for sched in schedulers:
                    for _ in range(sched._auto_steps(idx, agg, epoch_len)):
                        sched.step()
            record(batch_metrics(out))
            progress.batches_trained = idx + 1
            if in_epoch == epoch_len - 1:
                for cb in epoch_end_hooks:
                    cb.on_training_epoch_end(epoch_idx)
                progress.epochs_trained += 1

    def _report_training(self) -> None:
        chunk, self._chunk = self._chunk, []
        if self._bar is not None:
            self._bar.update(len(chunk))  # per chunk: no per-batch cost
        reduced = _metrics.reduce_training(
            chunk, self.dist.gather, self.settings.average_training_metrics
        )
        extra = self.validator.run_reducers(training=True)
        avg, per_batch = ({**reduced[0], **extra}, reduced[1]) if reduced else ({}, [])
        if self.chief:
            avg = self._with_length_metrics(avg)
            self.core.train.report_training_metrics(self.progress.batches_trained, avg, per_batch)
        avg, per_batch = self.dist.broadcast((avg, per_batch) if self.chief else None)
        for cb in self.callbacks.values():
            cb.on_training_workload_end(avg, per_batch)

    def _report_progress(self, length: TrainUnit, op: core.SearcherOperation | None) -> None:
        if not self.chief:
            return
        if op is None:  # the trial's own length: the fraction of it done
            if self.settings.on_cluster:
                assert isinstance(length.value, int)  # fit() checked it
                total = length.value * (self.epoch_len if isinstance(length, Epoch) else 1)
                self.core.train.report_progress(min(1.0, self.progress.batches_trained / total))
            return
        if self._done(op):
            return
        batches = self.progress.batches_trained
        if self.settings.searcher_unit == core.Unit.EPOCHS:
            op.report_progress(batches / self.epoch_len)
        elif self.settings.searcher_unit == core.Unit.RECORDS and self.settings.global_batch_size:
            op.report_progress(float(batches * self.settings.global_batch_size))
        else:
            op.report_progress(float(batches))

    def _with_length_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        # A 0.38-style search may rank trials by these (searcher.time_metric: batches).
        if not self.settings.length_metrics:
            return metrics
        done = {"batches": self.progress.batches_trained, "epochs": self.progress.epochs_trained}
        return {**done, **metrics}

    def _set_status(self, status: str) -> None:
        # Only changes: on a cluster each one is a request to the master, and training resumes
        # after every reporting boundary.
        if self.chief and status != self._status:
            self.core.train.set_status(status)
            self._status = status

    def _stop_requested(self) -> bool:
        preempt = self.core.preempt.should_preempt()
        asked = any(self.dist.allgather(self.context.get_stop_requested()))
        return bool(preempt or asked)

    # ---- validation and checkpoints --------------------------------------------------------

    def _validate_if_needed(self, length: TrainUnit | None, op: Any) -> None:
        stale = self.progress.last_val != self.progress.batches_trained
        if stale and self._validate(length, op) and self.settings.checkpoint_policy != "none":
            self._checkpoint_if_needed()

    def _validate(self, length: TrainUnit | None, op: core.SearcherOperation | None) -> bool:
        """Validate, report, maybe complete ``op``; returns the policy's checkpoint decision."""
        self._set_status("validating")
        with _state.rng_preserved():
            metrics = self.validator.validate()
        self.progress.last_val = self.progress.batches_trained
        decision = False
        if self.chief:
            decision = self._report_validation(metrics, length, op)
        return bool(self.dist.broadcast(decision if self.chief else None))

    def _report_validation(
        self, metrics: dict[str, Any], length: TrainUnit | None, op: Any
    ) -> bool:
        best_before = self._best_before()
        metrics = self._with_length_metrics(metrics)
        self.core.train.report_validation_metrics(self.progress.batches_trained, metrics)
        metric = self._searcher_metric(metrics, required=op is not None)
        done = length is not None and length_reached(
            length, self.progress.batches_trained, self.epoch_len
        )
        if op is not None and done and not self._done(op):
            op.report_completed(metric)
            self._last_completed = op
        if self.settings.checkpoint_policy == "all":
            return True
        if self.settings.checkpoint_policy != "best" or metric is None:
            return False
        better = best_before is None or (
            metric < best_before if self.settings.smaller_is_better else metric > best_before
        )
        if better and not self.settings.on_cluster:
            self._best = metric  # locally, the loop keeps the experiment's best itself
        return better

    def _done(self, op: core.SearcherOperation) -> bool:
        return op is self._last_completed  # ops complete in order, one at a time

    def _best_before(self) -> float | None:
        if not self.settings.on_cluster:
            return self._best
        return self.core.train.get_experiment_best_validation()

    def _searcher_metric(self, metrics: dict[str, Any], required: bool) -> Any:
        name = self.settings.searcher_metric
        if name is None:
            return None
        value = metrics.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            if not required and self.settings.checkpoint_policy != "best":
                return None
            raise RuntimeError(
                f"the searcher metric {name!r} must be a numeric scalar in the validation "
                f"metrics, but got {value!r} (metrics: {sorted(metrics)})"
            )
        return value

    def _checkpoint_if_needed(self) -> None:
        if self.progress.last_ckpt != self.progress.batches_trained:
            self._checkpoint()

    def _checkpoint(self) -> None:
        self._set_status("checkpointing")
        self.progress.last_ckpt = self.progress.batches_trained
        metadata = {
            "steps_completed": self.progress.batches_trained,
            "framework": f"torch-{torch.__version__}",
            "format": "pickle",
            "determined_version": det.__version__,
        }
        if self._async:
            self._checkpoint_in_background(metadata)
            return
        shard = self.dist.get_size() > 1
        uuid = None
        if shard or self.chief:
            with self.core.checkpoint.store_path(metadata, shard=shard) as (path, uuid):
                _checkpoint_io.write_rank_files(path, self.dist.get_rank())
                if self._sharded:
                    _checkpoint_io.write_sharded(path, self.setup)
                if self.chief:
                    _checkpoint_io.write_chief_files(
                        path, self.setup, self.callbacks, self.progress, self.settings
                    )
        uuid = self.dist.broadcast(uuid if self.chief else None)
        for cb in self.callbacks.values():
            cb.on_checkpoint_upload_end(uuid)

    def _checkpoint_in_background(self, metadata: dict[str, Any]) -> None:
        """Stage on the loop's thread (the previous checkpoint first finishes; every rank's RNG
        state goes to the chief), then the chief writes, commits and reports in the background.
        ``on_checkpoint_upload_end`` runs when a later boundary collects the result."""
        self._collect_background(block=True)
        rngs = self.dist.gather(_state.rng_state())
        if self.chief:
            staged = _checkpoint_io.stage(
                self.setup,
                self.callbacks,
                self.progress,
                self.settings,
                to_host=True,
                rank_rngs=rngs,
                staging=self._staging,
            )
            callbacks = self.callbacks

            def write(path: pathlib.Path) -> None:
                _checkpoint_io.write_staged(path, staged, callbacks)

            written = self.core.checkpoint.store_path_in_background(write, metadata)
            if not staged.on_host:  # too large to stage: the loop waits while it is written
                concurrent.futures.wait([written])
        self._writing = True

    def _collect_background(self, *, block: bool) -> None:
        """Collect the background checkpoint, if any: all ranks together, when it has ended
        (or at once with ``block``). Raises ``errors.CheckpointFailed`` on every rank if it
        was not saved."""
        if not self._writing:
            return
        if not block and not self.dist.broadcast(
            self.core.checkpoint._background_done() if self.chief else None
        ):
            return
        self._writing = False
        uuid, error = None, None
        if self.chief:
            try:
                uuid = self.core.checkpoint.wait_for_background()
            except errors.CheckpointFailed as e:
                error = e
        uuid, message = self.dist.broadcast(
            (uuid, None if error is None else str(error)) if self.chief else None
        )
        if error is not None:
            raise error
        if message is not None:
            raise errors.CheckpointFailed(f"on rank 0: {message}")
        for cb in self.callbacks.values():
            cb.on_checkpoint_upload_end(uuid)


# Hooks an asynchronous checkpoint runs elsewhere than 0.37 does: the first two on the
# background thread, the last at a later boundary.
_MOVED_HOOKS = ("on_checkpoint_end", "on_checkpoint_write_end", "on_checkpoint_upload_end")


def _async_checkpoints(
    setting: bool | None, callbacks: dict[str, PyTorchCallback], sharded: bool
) -> bool:
    """Whether checkpoints are written in the background. None (the default) means yes unless
    a callback overrides a hook that would then run on another thread or later than in 0.37
    (such trials keep 0.37's timing unless they ask)."""
    if sharded:
        if setting:
            logger.warning(
                "async_checkpoints is not supported with FSDP2 models yet: their sharded "
                "checkpoints are written synchronously"
            )
        return False
    if setting is not None:
        return setting
    moved = [
        f"{name}.{hook}"
        for name, cb in callbacks.items()
        for hook in _MOVED_HOOKS
        if _overrides(cb, hook)
    ]
    if moved:
        logger.info(
            f"checkpoints are written synchronously: callback hooks {', '.join(moved)} would "
            "run on a background thread or later with asynchronous checkpoints (set "
            "optimizations.async_checkpoints: true to have them anyway)"
        )
        return False
    return True


def _warn_deprecated_hooks(callbacks: dict[str, PyTorchCallback]) -> None:
    for name, cb in callbacks.items():
        if _overrides(cb, "on_checkpoint_end"):
            warnings.warn(
                f"callback {name!r} overrides on_checkpoint_end, which is deprecated: "
                "override on_checkpoint_write_end instead",
                FutureWarning,
                stacklevel=3,
            )


def _epoch_start_hook(name: str, callback: PyTorchCallback) -> Callable[[int], None]:
    """``callback.on_training_epoch_start`` as a call with the epoch index. Callbacks written
    before 0.17.8 take no argument: they are called without it, with a deprecation warning
    (once per callback, where 0.37 logs one per epoch)."""
    hook = callback.on_training_epoch_start
    try:
        takes_epoch = bool(inspect.signature(hook).parameters)
    except (TypeError, ValueError):  # no signature to read (a C function): pass the index
        takes_epoch = True
    if takes_epoch:
        return hook
    message = (
        f"callback {name!r}: on_training_epoch_start() without parameters is deprecated since "
        "0.17.8; add the epoch_idx parameter"
    )
    logger.warning(message)
    warnings.warn(message, FutureWarning, stacklevel=2)
    return lambda epoch_idx: hook()  # type: ignore[call-arg]


def _overrides(callback: PyTorchCallback, hook: str) -> bool:
    """Whether ``callback``'s ``hook`` does anything (is not PyTorchCallback's no-op)."""
    return getattr(getattr(callback, hook), "__func__", None) is not getattr(PyTorchCallback, hook)


def _next_batch(batches: Iterator[Any], profiling: bool) -> Callable[[], Any]:
    """How the loop takes its next batch between two boundaries. From a torch DataLoader's
    iterator (what a ``det.pytorch.DataLoader`` gives) while no profiler records, that is
    ``__next__`` without the ``record_function`` label torch puts around it: the label only
    shows in profiles and costs several microseconds a batch, a few percent of a small model's
    step. A profiler started inside ``train_batch`` gets the labels from the next boundary on.
    """
    if profiling or torch.autograd._profiler_enabled():
        return batches.__next__
    if isinstance(batches, _BaseDataLoaderIter) and batches._sampler_iter is not None:
        # __next__ without the label (and without counting batches for IterableDataset
        # length warnings: our DataLoader refuses an IterableDataset).
        return batches._next_data
    return batches.__next__


def _forever(loader: Any) -> Iterator[Any]:
    # A plain torch loader does not repeat; Determined 0.37 spins forever once it runs dry.
    while True:
        yield from loader
