"""What a batch processor sees: ``TorchBatchProcessor`` (the user's class) and the
``TorchBatchProcessorContext`` it is built with."""

from __future__ import annotations

import abc
import contextlib
import pathlib
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import torch

import determined as det
from determined import core
from determined.pytorch._reducer import MetricReducer, _run_reducers, _wrap_reducer, _WrappedReducer
from determined.pytorch._to_device import to_device


def get_default_device(core_context: core.Context) -> torch.device:
    """``cuda:<local rank>`` when this machine has GPUs, else the CPU."""
    if torch.cuda.device_count() == 0:
        return torch.device("cpu")
    return torch.device("cuda", core_context.distributed.get_local_rank())


class TorchBatchProcessorContext:
    """Handed to the user's :class:`TorchBatchProcessor` by ``torch_batch_process``.

    ``storage_path`` is where ``upload_path()`` files go inside the checkpoint storage:
    ``<output uuid>/rank_<rank>``, the same for every run of the trial.
    """

    def __init__(self, core_context: core.Context, storage_path: str) -> None:
        self._core_context = core_context
        self.device = get_default_device(core_context)
        self._storage_path = storage_path
        self._use_default_storage = False
        self._reducers: list[_WrappedReducer] = []

    def get_hparams(self) -> dict[str, Any]:
        """The trial's hyperparameters. RuntimeError outside a trial."""
        info = det.get_cluster_info()
        if info is None or info.task_type != "TRIAL":
            raise RuntimeError("get_hparams() needs a trial on a cluster")
        return dict(info.trial.hparams)

    def to_device(self, data: Any, warned_types: set[type] | None = None) -> Any:
        """Move tensors (in lists, tuples, dicts) to :attr:`device`; ndarrays become tensors."""
        return to_device(data, self.device, warned_types)

    def get_tensorboard_path(self) -> pathlib.Path | None:
        """The directory whose files are synced as this trial's TensorBoard data (e.g. for
        ``torch.profiler.tensorboard_trace_handler``)."""
        return self._core_context.train.get_tensorboard_path()

    def prepare_model_for_inference(self, model: torch.nn.Module) -> torch.nn.Module:
        """Put ``model`` in eval mode on :attr:`device`; returns it."""
        model.eval()
        model.to(self.device)
        return model

    @contextlib.contextmanager
    def upload_path(self) -> Iterator[pathlib.Path]:
        """A local directory whose files are copied, when the block ends without an error, to
        ``<checkpoint storage>/<output uuid>/rank_<rank>/`` (files of earlier calls stay; a
        file of the same name is replaced). Each rank writes its own directory."""
        self._use_default_storage = True
        # The reference reaches for the same manager: outputs live beside the checkpoints.
        manager = self._core_context.checkpoint._storage_manager
        with tempfile.TemporaryDirectory(prefix="det-batch-output-") as tmp:
            path = pathlib.Path(tmp)
            yield path
            files = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()]
            manager.put_files(path, self._storage_path, {f: f for f in files})

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        """``core_context.train.report_metrics``: metrics of any group (no '.')."""
        self._core_context.train.report_metrics(group, steps_completed, metrics)

    def report_task_using_model_version(self, model_version: Any) -> None:
        self._core_context.experimental.report_task_using_model_version(model_version)

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        self._core_context.experimental.report_task_using_checkpoint(checkpoint)

    def get_distributed_rank(self) -> int:
        return self._core_context.distributed.get_rank()

    def get_distributed_size(self) -> int:
        return self._core_context.distributed.get_size()

    def wrap_reducer(
        self,
        reducer: Callable[[list[Any]], Any] | MetricReducer,
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a metric reducer (a ``MetricReducer`` or ``fn(values)``); its result is
        reported as validation metrics when processing ends or is preempted. Returns the
        reducer to call ``update`` on."""
        return _wrap_reducer(self._reducers, reducer, name, for_training, for_validation)

    def reset_reducers(self) -> None:
        for w in self._reducers:
            w.reducer.reset()

    def reduce_metrics(self, for_training: bool) -> dict[str, Any]:
        """Reduce the registered reducers across ranks: the metrics on the chief, ``{}`` on the
        others. A collective: every rank calls it."""
        chosen = [
            w for w in self._reducers if (w.for_training if for_training else w.for_validation)
        ]
        return _run_reducers(chosen, self._core_context.distributed.gather)


class TorchBatchProcessor(abc.ABC):
    """Subclass it and pass the class to ``torch_batch_process``, which builds one instance per
    rank and calls ``process_batch`` for each of the rank's batches."""

    @abc.abstractmethod
    def __init__(self, context: TorchBatchProcessorContext) -> None:
        """Build what processing needs (a model: ``context.prepare_model_for_inference``)."""

    @abc.abstractmethod
    def process_batch(self, batch: Any, batch_idx: int) -> None:
        """Process one batch. ``batch_idx`` counts this rank's batches (0, 1, ...): with 8
        batches and 4 ranks each rank sees indices 0 and 1."""

    def on_checkpoint_start(self) -> None:  # noqa: B027 (optional hook)
        """Called before each progress checkpoint: flush buffered outputs here."""

    def on_finish(self) -> None:  # noqa: B027 (optional hook)
        """Called once every batch is processed (not when preempted)."""
