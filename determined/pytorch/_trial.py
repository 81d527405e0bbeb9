"""``PyTorchTrial``: the class users subclass; the loop calls its methods with the reference's
keyword names."""

from __future__ import annotations

import abc
import inspect
from typing import Any

import torch

import determined as det
from determined import errors
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._context import PyTorchTrialContext
from determined.pytorch._data import DataLoader
from determined.pytorch._reducer import Reducer
from determined.pytorch._to_device import TorchData, data_length


class PyTorchTrial(det.LegacyTrial, abc.ABC):
    """A model trained by Determined's loop.

    ``__init__(context)`` must wrap at least one model and one optimizer. Override exactly one
    of :meth:`evaluate_batch` and :meth:`evaluate_full_dataset`.
    """

    trial_context_class = PyTorchTrialContext

    @abc.abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None:
        pass

    @abc.abstractmethod
    def train_batch(
        self, batch: TorchData, epoch_idx: int, batch_idx: int
    ) -> torch.Tensor | dict[str, Any]:
        """Train on one batch: forward, ``context.backward``, ``context.step_optimizer``.
        Return the loss tensor (reported as ``loss``) or a dict of metrics. ``batch_idx`` is
        this rank's global batch index, continued across resumes."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader:
        """A ``det.pytorch.DataLoader`` over the training data (sharded by the loop)."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader:
        """A ``det.pytorch.DataLoader`` over the validation data."""

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Callbacks by name; the name keys the callback's state in checkpoints."""
        return {}

    def evaluate_batch(self, batch: TorchData, batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch; reduced per :meth:`evaluation_reducer`."""
        raise NotImplementedError("override evaluate_batch or evaluate_full_dataset")

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader) -> dict[str, Any]:
        """Metrics of the whole validation set, computed on the chief only."""
        raise NotImplementedError("override evaluate_batch or evaluate_full_dataset")

    def evaluation_reducer(self) -> Reducer | dict[str, Reducer]:
        """How ``evaluate_batch`` metrics combine over batches and ranks (AVG by default)."""
        return Reducer.AVG

    def get_batch_length(self, batch: Any) -> int:
        """The number of records in ``batch`` (for record-based lengths)."""
        return data_length(batch)


def _overrides(trial: PyTorchTrial, name: str) -> bool:
    return not getattr(type(trial), name).__qualname__.startswith("PyTorchTrial.")


def _check_trial(trial: PyTorchTrial, context: PyTorchTrialContext) -> bool:
    """Validate a constructed trial; returns True when it evaluates batch by batch."""
    if not context.models:
        raise errors.InvalidExperimentException(
            "the trial wrapped no model: call context.wrap_model() in __init__"
        )
    if not context.optimizers:
        raise errors.InvalidExperimentException(
            "the trial wrapped no optimizer: call context.wrap_optimizer() in __init__"
        )
    by_batch = _overrides(trial, "evaluate_batch")
    if by_batch == _overrides(trial, "evaluate_full_dataset"):
        raise errors.InvalidExperimentException(
            "override exactly one of evaluate_batch() and evaluate_full_dataset() "
            f"({type(trial).__name__} overrides {'both' if by_batch else 'neither'})"
        )
    return by_batch


def _takes_batch_idx(trial: PyTorchTrial) -> bool:
    params = inspect.signature(trial.evaluate_batch).parameters
    positional = [
        p
        for p in params.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    # Bound method: "batch" and "batch_idx" are two parameters (the reference counts self).
    return "batch_idx" in params or len(positional) >= 2
