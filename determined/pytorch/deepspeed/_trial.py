"""``DeepSpeedTrial``: the class a DeepSpeed model subclasses (trained by
``DeepSpeedTrialController``)."""

from __future__ import annotations

import abc
import pathlib
from collections.abc import Iterator
from typing import Any

import torch

import determined as det
from determined import pytorch
from determined.pytorch.deepspeed._context import DeepSpeedTrialContext


class DeepSpeedTrial(det.LegacyTrial):
    """A model trained with DeepSpeed engines, one process per slot.

    ``__init__(context)`` builds the engines with ``deepspeed.initialize`` and registers them
    with ``context.wrap_model_engine``. The loop then calls, on every rank:
    ``build_training_data_loader`` / ``build_validation_data_loader`` (per-slot micro batches),
    ``train_batch`` (once per micro batch of a batch unless
    ``context.disable_auto_grad_accumulation()`` was called or the engine is a pipeline),
    ``evaluate_batch``, and ``save`` / ``load`` for checkpoints (each rank writes its own shard
    into the same Determined checkpoint).
    """

    trial_context_class = DeepSpeedTrialContext

    @abc.abstractmethod
    def __init__(self, context: DeepSpeedTrialContext) -> None:
        """Build the engines (``deepspeed.initialize``) and register them with
        ``context.wrap_model_engine``."""

    @abc.abstractmethod
    def train_batch(
        self,
        dataloader_iter: Iterator[pytorch.TorchData] | None,
        epoch_idx: int,
        batch_idx: int,
    ) -> torch.Tensor | dict[str, Any]:
        """Train on the next micro batch(es) of ``dataloader_iter`` (forward, the engine's
        ``backward`` and ``step``; a pipeline engine's ``train_batch``) and return the loss or
        a dict of metrics. ``batch_idx`` counts batches since the start of training."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> pytorch.DataLoader | None:
        """The training data in micro batches of ``train_micro_batch_size_per_gpu``: a
        ``determined.pytorch.DataLoader`` (repeated, sharded and resumed by the loop)."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> pytorch.DataLoader | None:
        """The validation data, sharded across data-parallel ranks by the loop."""

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        """Callbacks by name (the name keys their checkpointed state)."""
        return {}

    @abc.abstractmethod
    def evaluate_batch(
        self, dataloader_iter: Iterator[pytorch.TorchData] | None, batch_idx: int
    ) -> dict[str, Any]:
        """Metrics of the next validation batch; the loop averages them over batches and
        ranks (or uses the reducers wrapped with ``context.wrap_reducer``)."""

    def save(self, context: DeepSpeedTrialContext, path: pathlib.Path) -> None:
        """Write this rank's part of a checkpoint into ``path`` (called on every rank): by
        default each wrapped engine's ``save_checkpoint(path, tag="model<i>")``."""
        for i, engine in enumerate(context.models):
            engine.save_checkpoint(path, tag=f"model{i}")

    def load(self, context: DeepSpeedTrialContext, load_path: pathlib.Path) -> None:
        """Restore from a checkpoint written by :meth:`save` (called on every rank): by
        default each wrapped engine's ``load_checkpoint(load_path, tag="model<i>")``."""
        for i, engine in enumerate(context.models):
            try:
                engine.load_checkpoint(load_path, tag=f"model{i}")
            except AssertionError as e:
                raise AssertionError(
                    f"Failed to load deepspeed checkpoint model{i} from {load_path}: {e}"
                ) from e
