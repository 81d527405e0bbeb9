"""Writing reported metrics as TensorBoard event files.

``BatchMetricWriter`` holds the rules of the Core API's AUTO mode (which values, which tags, at
which steps); a ``MetricWriter`` puts scalars into files. ``EventWriter`` is ours: tfevents files
encoded by ``_tfrecord`` (no TensorFlow, torch or tensorboard import needed to write them).
"""

from __future__ import annotations

import abc
import itertools
import logging
import os
import pathlib
import socket
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from determined.tensorboard import _paths, _tfrecord

logger = logging.getLogger("determined.tensorboard")

TAG_PREFIX = "Determined/"


# Numbers the files one process opens. SummaryWriters (context.get_tensorboard_writer()) may
# write into the same directory in the same second and number theirs from 0 with tensorboard's
# own counter; ours start far above it, so names never collide.
_file_numbers = itertools.count(1_000_000)


def is_numerical_scalar(value: Any) -> bool:
    """True for what TensorBoard can plot as one point: Python ints and floats (bools too, as
    ints are), numpy numbers and 0-dimensional numeric numpy arrays. Strings, lists, tensors
    and None are not."""
    if isinstance(value, (int, float, np.number)):
        return True
    return (
        isinstance(value, np.ndarray) and value.ndim == 0 and np.issubdtype(value.dtype, np.number)
    )


class MetricWriter(abc.ABC):
    """Puts scalars into TensorBoard files. Subclass it to send AUTO-mode metrics elsewhere."""

    @abc.abstractmethod
    def add_scalar(self, name: str, value: int | float | np.number, step: int) -> None:
        """Record ``value`` for tag ``name`` at ``step``."""

    def add_scalars(
        self,
        name: str,
        values: Sequence[int | float | np.number],
        steps: Sequence[int],
        wall_times: Sequence[float] | None = None,
    ) -> None:
        """Record ``values[i]`` for tag ``name`` at ``steps[i]``, reported at ``wall_times[i]``
        (now when None). The default calls ``add_scalar`` for each, dropping the wall times;
        override it to batch the work."""
        for value, step in zip(values, steps, strict=True):
            self.add_scalar(name, value, step)

    @abc.abstractmethod
    def reset(self) -> None:
        """Finish the current file; the next scalar starts a new one."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Make everything added so far readable in the files."""

    def close(self) -> None:
        """Flush and release the files. The default is ``reset()``."""
        self.reset()


class EventWriter(MetricWriter):
    """Writes scalars as ``simple_value`` summaries into ``events.out.tfevents.*`` files under
    ``log_dir`` (created on the first scalar), readable by TensorBoard and by
    ``tensorboard.backend.event_processing.event_accumulator.EventAccumulator``.

    Synchronous: scalars are serialized as they are added and written, framed, by ``flush``
    (one ``write`` per report). tensorboard's ``EventFileWriter`` hands every event to a
    background thread, which made AUTO mode's per-batch metrics cost ~50 us a batch.
    Not thread-safe: call it from one thread (the Core API calls it from the reporting thread).
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = pathlib.Path(log_dir)
        self._file: Any = None  # opened lazily, with its file_version event
        self._pending: list[bytes] = []  # events not yet framed
        self._framed: list[bytes] = []  # framed records, written before ``_pending``

    def _open(self) -> Any:
        if self._file is None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            host, pid, number = socket.gethostname(), os.getpid(), next(_file_numbers)
            name = f"events.out.tfevents.{int(time.time()):010d}.{host}.{pid}.{number}"
            self._file = open(self.log_dir / name, "wb")  # noqa: SIM115 (closed in reset)
            self._pending.insert(0, _tfrecord.file_version_event(time.time()))
        return self._file

    def add_scalar(self, name: str, value: int | float | np.number, step: int) -> None:
        if self._file is None:
            self._open()
        self._pending.append(_tfrecord.scalar_event(name, float(value), step, time.time()))

    def add_scalars(
        self,
        name: str,
        values: Sequence[int | float | np.number],
        steps: Sequence[int],
        wall_times: Sequence[float] | None = None,
    ) -> None:
        if self._file is None:
            self._open()
        if self._pending:  # keep the file in the order scalars were added
            self._framed.append(_tfrecord.frame(self._pending))
            self._pending = []
        walls = time.time() if wall_times is None else wall_times
        self._framed.append(_tfrecord.scalar_series(name, values, steps, walls))

    def flush(self) -> None:
        if self._file is not None and (self._pending or self._framed):
            if self._pending:
                self._framed.append(_tfrecord.frame(self._pending))
            self._file.write(b"".join(self._framed))
            self._file.flush()
        self._pending, self._framed = [], []

    def reset(self) -> None:
        if self._file is not None:
            self.flush()
            file, self._file = self._file, None
            file.close()


class BatchMetricWriter:
    """Writes training and validation reports to TensorBoard with the reference's rules.

    Tags are ``Determined/<name>`` for training and ``Determined/val_<name>`` for validation
    (``Determined/<name>`` when the name already starts with ``val``). Only numerical scalars
    (:func:`is_numerical_scalar`) are written; anything else is skipped silently.

    Training reports are written at most once per ``write_interval`` seconds: the first at once,
    later ones by the first report a ``write_interval`` after the last write, by any validation
    report, and by :meth:`flush` and :meth:`close`. Each value keeps the wall time of its report.
    Encoding and writing every report on its own costs a small model a few microseconds a batch;
    Determined 0.37 likewise keeps up to a second of events in memory before its files rotate.

    Called by ``TrainContext`` on the chief in ``TensorboardMode.AUTO``; not thread-safe.
    """

    MAX_BUFFERED = 100_000  # values; a report that brings the buffer past this writes at once

    def __init__(self, writer: MetricWriter, write_interval: float = 1.0) -> None:
        self.writer = writer
        self.write_interval = write_interval
        self._last_flush: float | None = None
        # tag -> (values, steps, wall times), in the order they were reported
        self._buffer: dict[str, tuple[list[Any], list[int], list[float]]] = {}
        self._buffered = 0

    def on_train_step_end(
        self,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        """Add one training report.

        ``batch_metrics[i]`` goes at step ``steps_completed - len(batch_metrics) + i``; each
        averaged metric whose name no batch carried goes at ``steps_completed``.
        """
        now = time.time()
        in_batches: set[str] = set()
        if batch_metrics:
            first_step = steps_completed - len(batch_metrics)
            series: dict[str, tuple[list[Any], list[int]]] = {}
            for i, batch in enumerate(batch_metrics):  # every batch: kept lean
                in_batches.update(batch)
                for name, value in batch.items():
                    if type(value) is float or is_numerical_scalar(value):
                        values_steps = series.get(name)
                        if values_steps is None:
                            values_steps = series[name] = ([], [])
                        values_steps[0].append(value)
                        values_steps[1].append(first_step + i)
            for name, (values, steps) in series.items():
                self._add(TAG_PREFIX + name, values, steps, now)
        for name, value in metrics.items():
            if name not in in_batches and is_numerical_scalar(value):
                self._add(TAG_PREFIX + name, [value], [steps_completed], now)
        last = self._last_flush
        if last is None or now - last >= self.write_interval or self._buffered >= self.MAX_BUFFERED:
            self.flush()

    def on_validation_step_end(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Write one validation report at ``steps_completed``, with any buffered training."""
        now = time.time()
        for name, value in metrics.items():
            if is_numerical_scalar(value):
                tag = TAG_PREFIX + validation_tag_name(name)
                self._add(tag, [value], [steps_completed], now)
        self.flush()

    def flush(self) -> None:
        """Write every buffered value and make it readable in the files."""
        self._maybe_reset()
        buffer, self._buffer, self._buffered = self._buffer, {}, 0
        for tag, (values, steps, wall_times) in buffer.items():
            self.writer.add_scalars(tag, values, steps, wall_times)
        self.writer.flush()
        self._last_flush = time.time()

    def close(self) -> None:
        """Write what is buffered and close the current file. Writing again afterwards starts a
        new file."""
        self.flush()
        self.writer.close()

    def _add(self, tag: str, values: list[Any], steps: list[int], wall_time: float) -> None:
        series = self._buffer.get(tag)
        if series is None:
            series = self._buffer[tag] = ([], [], [])
        series[0].extend(values)
        series[1].extend(steps)
        series[2].extend([wall_time] * len(values))
        self._buffered += len(values)

    def _maybe_reset(self) -> None:
        # A new file per wall-clock second (as the reference): a sync re-uploads whole changed
        # files, so small finished files keep each upload small however long the trial runs.
        if self._last_flush is not None and int(time.time()) > int(self._last_flush):
            self.writer.reset()


def validation_tag_name(name: str) -> str:
    """``loss`` -> ``val_loss``; a name already starting with ``val`` is kept."""
    return name if name.startswith("val") else "val_" + name


def get_metric_writer(log_dir: str | os.PathLike[str] | None = None) -> BatchMetricWriter:
    """The AUTO-mode writer: ``BatchMetricWriter(EventWriter(log_dir))``. Without ``log_dir``
    (0.37's signature) it writes where a cluster trial's TensorBoard files are synced from,
    ``tensorboard.get_base_path({})``."""
    if log_dir is None:
        log_dir = _paths.get_base_path({})
    return BatchMetricWriter(EventWriter(log_dir))
