"""Validation for the training loop: ``evaluate_batch`` over each rank's shard (reduced per
rank, then across ranks) or ``evaluate_full_dataset`` on the chief; plus the wrapped custom
reducers, shared with training."""

from __future__ import annotations

from typing import Any

import torch

from determined.pytorch import _metrics, _reducer
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._context import _TrainingSetup
from determined.pytorch._data import DataLoader
from determined.pytorch._trial import PyTorchTrial, _takes_batch_idx


class Validator:
    def __init__(
        self,
        trial: PyTorchTrial,
        setup: _TrainingSetup,
        callbacks: dict[str, PyTorchCallback],
        settings: Any,
        by_batch: bool,
    ) -> None:
        self.trial, self.setup, self.callbacks = trial, setup, callbacks
        self.s, self.by_batch = settings, by_batch
        self.data_seed: int | None = settings.data_seed  # the loop sets the run's own
        self.dist = setup.core.distributed
        self.chief = self.dist.get_rank() == 0
        self.loader: Any = None
        self._with_idx = _takes_batch_idx(trial) if by_batch else False

    def check_raw_loader(self, loader: Any, hook: str) -> None:
        if self.setup.data_repro_checks:
            raise RuntimeError(
                f"{hook}() returned {type(loader).__name__}, not det.pytorch.DataLoader. "
                "Return a det.pytorch.DataLoader (sharded, resumable), or call "
                "context.experimental.disable_dataset_reproducibility_checks() in __init__ to "
                "use a plain loader as is"
            )

    def set_loader(self, loader: Any) -> None:
        if not isinstance(loader, DataLoader):
            self.check_raw_loader(loader, "build_validation_data_loader")
        self.loader = loader

    def _torch_loader(self, sharded: bool) -> Any:
        if not isinstance(self.loader, DataLoader):
            return self.loader
        n, r = (self.dist.get_size(), self.dist.get_rank()) if sharded else (1, 0)
        return self.loader.get_data_loader(num_replicas=n, rank=r, seed=self.data_seed)

    # ---- reducers --------------------------------------------------------------------------

    def _wrapped(self, training: bool) -> list[_reducer._WrappedReducer]:
        return [
            w for w in self.setup.reducers if (w.for_training if training else w.for_validation)
        ]

    def reset_reducers(self, training: bool) -> None:
        for w in self._wrapped(training):
            w.reducer.reset()

    def run_reducers(self, training: bool) -> dict[str, Any]:
        wrapped = self._wrapped(training)
        return _reducer._run_reducers(wrapped, self.dist.gather) if wrapped else {}

    # ---- validation ------------------------------------------------------------------------

    def validate(self) -> dict[str, Any]:
        """A collective: every rank validates; returns the metrics on the chief (and on every
        rank when a callback overrides ``on_validation_end``), ``{}`` elsewhere."""
        self.reset_reducers(training=False)
        for m in self.setup.models:
            m.eval()
        for cb in self.callbacks.values():
            cb.on_validation_start()
        with torch.no_grad():
            metrics = self._by_batch() if self.by_batch else self._full_dataset()
            metrics.update(self.run_reducers(training=False))
        if self.dist.get_size() > 1 and self._end_hook_overridden():
            metrics = self.dist.broadcast(metrics if self.chief else None)
        for cb in self.callbacks.values():
            cb.on_validation_end(metrics)
        return metrics

    def _end_hook_overridden(self) -> bool:
        base = PyTorchCallback.on_validation_end
        return any(type(cb).on_validation_end is not base for cb in self.callbacks.values())

    def _by_batch(self) -> dict[str, Any]:
        for cb in self.callbacks.values():
            cb.on_validation_epoch_start()
        outputs = []
        for idx, batch in enumerate(self._torch_loader(sharded=True)):
            if self.setup.auto_to_device:
                batch = self.setup.to_device(batch)
            if self._with_idx:
                out = self.trial.evaluate_batch(batch=batch, batch_idx=idx)
            else:
                out = self.trial.evaluate_batch(batch=batch)  # type: ignore[call-arg]
            outputs.append(out)
            if self.s.test_mode:
                break
        if not outputs:
            raise RuntimeError(
                f"rank {self.dist.get_rank()} got no validation batches: the validation set "
                f"has fewer batches than the {self.dist.get_size()} ranks; use more data or a "
                "smaller batch size"
            )
        for cb in self.callbacks.values():
            cb.on_validation_epoch_end(outputs)
        spec = self.trial.evaluation_reducer()
        mine = _reducer._per_rank_reduce(_metrics.to_numbers(outputs), spec)
        gathered = self.dist.gather((mine, len(outputs)))
        return {} if gathered is None else _reducer._cross_rank_reduce(gathered, spec)

    def _full_dataset(self) -> dict[str, Any]:
        if not self.chief:
            return {}
        metrics = self.trial.evaluate_full_dataset(data_loader=self._torch_loader(sharded=False))
        if not isinstance(metrics, dict):
            raise TypeError(
                f"evaluate_full_dataset must return a dict of metrics, not {type(metrics)}"
            )
        return {k: v if isinstance(v, str) else _reducer._to_python(v) for k, v in metrics.items()}
