"""Training and validation metrics, status, progress and early exits.

``TrainContext`` holds the checks and the TensorBoard writing that both backends share; where
reports go is a ``_TrainBackend``: the master (metrics shipped asynchronously) or the log.
"""

from __future__ import annotations

import copy
import enum
import logging
import pathlib
from collections.abc import Callable
from typing import Any, Protocol

from determined import errors
from determined.common.api import Session, _routes
from determined.core._metrics import MetricsShipper
from determined.core._tensorboard_mode import TensorboardMode

logger = logging.getLogger("determined.core")

TRAINING = "training"
VALIDATION = "validation"


class EarlyExitReason(enum.Enum):
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


class _TrainBackend(Protocol):
    def start(self) -> None: ...

    def close(self) -> None: ...

    def report(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None,
    ) -> None: ...

    def set_status(self, status: str) -> None: ...

    def report_progress(self, progress: float) -> None: ...

    def report_early_exit(self, reason: EarlyExitReason) -> None: ...

    def best_validation(self) -> float | None: ...

    def last_validation(self) -> int | None: ...

    def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any] | None: ...

    def get_metadata(self) -> dict[str, Any] | None: ...


class _MasterTrainBackend:
    """Reports to the master's trial endpoints; metrics go through a ``MetricsShipper``."""

    def __init__(
        self, session: Session, shipper: MetricsShipper, trial_id: int, exp_id: int
    ) -> None:
        self._session = session
        self._shipper = shipper
        self._trial_id = trial_id
        self._exp_id = exp_id

    def start(self) -> None:
        self._shipper.start()

    def close(self) -> None:
        self._shipper.close()

    def report(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None,
    ) -> None:
        self._shipper.report(group, steps_completed, metrics, batch_metrics)

    def set_status(self, status: str) -> None:
        _routes.set_runner_state(self._session, self._trial_id, status)

    def report_progress(self, progress: float) -> None:
        body = {"progress": progress, "is_raw": True}
        _routes.report_trial_progress(self._session, self._trial_id, body)

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        try:
            _routes.report_early_exit(self._session, self._trial_id, reason.value)
        except errors.BadRequest:
            logger.warning("an early exit was already reported for this trial; ignoring this one")

    def best_validation(self) -> float | None:
        try:
            return _routes.get_best_searcher_validation(self._session, self._exp_id)
        except errors.MasterNotFound:
            return None  # no validations yet

    def last_validation(self) -> int | None:
        trial = _routes.get_trial(self._session, self._trial_id)
        latest = trial.get("latestValidation") or {}
        total = latest.get("totalBatches")
        return None if total is None else int(total)

    def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any] | None:
        return _routes.post_run_metadata(self._session, self._trial_id, metadata)

    def get_metadata(self) -> dict[str, Any] | None:
        return _routes.get_run_metadata(self._session, self._trial_id)


class _LocalTrainBackend:
    """Without a master: every report is logged; there is no experiment to compare with, and
    run metadata lives in this process only."""

    def __init__(self) -> None:
        self._metadata: dict[str, Any] = {}

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def report(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None,
    ) -> None:
        logger.info(f"{group} metrics at step {steps_completed}: {metrics}")

    def set_status(self, status: str) -> None:
        logger.info(f"status: {status}")

    def report_progress(self, progress: float) -> None:
        logger.debug(f"progress: {progress:.3f}")

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        logger.info(f"early exit: {reason.value}")

    def best_validation(self) -> float | None:
        return None

    def last_validation(self) -> int | None:
        return None

    def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any] | None:
        logger.info(f"run metadata: {metadata}")
        self._metadata = copy.deepcopy(metadata)
        return copy.deepcopy(metadata)

    def get_metadata(self) -> dict[str, Any] | None:
        return copy.deepcopy(self._metadata)


class _MetricWriter(Protocol):
    def on_train_step_end(
        self,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None: ...

    def on_validation_step_end(self, steps_completed: int, metrics: dict[str, Any]) -> None: ...


class _TensorboardSync(Protocol):
    base_path: pathlib.Path

    def sync(
        self,
        selector: Callable[[pathlib.Path], bool] | None = None,
        mangler: Callable[[pathlib.Path, int], pathlib.Path] | None = None,
        rank: int = 0,
    ) -> None: ...


def _reportable_validation(metrics: dict[str, Any]) -> dict[str, Any]:
    """Validation values may not be None (a trial bug); bytes values are dropped with a warning."""
    for name, value in metrics.items():
        if value is None:
            raise RuntimeError(
                # The reference's wording: user code may match on it.
                f"Validation metric {name!r} returned an invalid scalar value: None"
            )
    dropped = sorted(k for k, v in metrics.items() if isinstance(v, (bytes, bytearray)))
    if dropped:
        logger.warning(f"dropped validation metrics that are bytes: {', '.join(dropped)}")
    return {k: v for k, v in metrics.items() if k not in dropped}


class TrainContext:
    """Report metrics and progress of a training run (to the master, or to the log locally).

    Metric reports are asynchronous: they return at once, and a failure to deliver one is raised
    by the next report or by ``core.Context.close()``. Call from the chief unless noted.
    """

    def __init__(
        self,
        backend: _TrainBackend,
        rank: int = 0,
        tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
        tensorboard_manager: _TensorboardSync | None = None,
        tensorboard_writer: _MetricWriter | None = None,
        tensorboard_path: pathlib.Path | None = None,
    ) -> None:
        self._backend = backend
        self._rank = rank
        self._tb_mode = TensorboardMode(tensorboard_mode)
        self._tb_manager = tensorboard_manager
        self._tb_writer = tensorboard_writer
        self._tb_path = tensorboard_manager.base_path if tensorboard_manager else tensorboard_path

    def _start(self) -> None:
        self._backend.start()

    def _close(self) -> None:
        self._backend.close()

    def _report(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        if not isinstance(group, str) or not group or "." in group:
            raise ValueError(f"metric group must be a non-empty string without '.', not {group!r}")
        shipped = _reportable_validation(metrics) if group == VALIDATION else metrics
        self._backend.report(group, steps_completed, shipped, batch_metrics)
        if self._tb_mode != TensorboardMode.AUTO:
            return
        if self._tb_writer is not None:
            if group == TRAINING:
                self._tb_writer.on_train_step_end(steps_completed, metrics, batch_metrics)
            elif group == VALIDATION:
                self._tb_writer.on_validation_step_end(steps_completed, shipped)
        if self._tb_manager is not None:
            self._tb_manager.sync()

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        """Report averaged training metrics at ``steps_completed`` (and optionally one dict per
        batch). Written to TensorBoard as ``Determined/<name>`` in AUTO mode."""
        self._report(TRAINING, steps_completed, metrics, batch_metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Report validation metrics. None values raise RuntimeError; bytes values are dropped."""
        self._report(VALIDATION, steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Report metrics of any group (a name without '.'); ``training`` and ``validation``
        are the built-in series."""
        self._report(group, steps_completed, metrics)

    def set_status(self, status: str) -> None:
        """A short string shown as what the trial is doing (e.g. "training")."""
        self._backend.set_status(status)

    def report_progress(self, progress: float) -> None:
        """Report the fraction of the trial's work done, in [0, 1] (else ValueError)."""
        if not 0 <= progress <= 1:
            raise ValueError(f"progress must be between 0 and 1, not {progress}")
        self._backend.report_progress(progress)

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Tell the search this trial stops early (e.g. invalid hyperparameters)."""
        self._backend.report_early_exit(EarlyExitReason(reason))

    def get_experiment_best_validation(self) -> float | None:
        """The best searcher-metric value over the experiment so far (None if none, or local)."""
        return self._backend.best_validation()

    def _get_last_validation(self) -> int | None:
        return self._backend.last_validation()

    def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """Replace this run's (trial's) metadata with ``metadata``, a JSON object for analysis
        or debugging, and return what the master stored. Any rank may call it; the last call
        wins. Without a master it is kept in this process only.

        Raises:
            TypeError: ``metadata`` is not a dict with string keys.
        """
        if not isinstance(metadata, dict) or not all(isinstance(k, str) for k in metadata):
            raise TypeError(
                f"run metadata must be a dict with string keys, not {type(metadata).__name__}"
            )
        logger.debug(f"set_metadata({metadata})")
        return self._backend.set_metadata(metadata)

    def get_metadata(self) -> dict[str, Any] | None:
        """This run's metadata as last set (``{}`` before any ``set_metadata``)."""
        return self._backend.get_metadata()

    def get_tensorboard_path(self) -> pathlib.Path | None:
        """The directory whose files become this trial's TensorBoard data."""
        return self._tb_path

    def upload_tensorboard_files(
        self,
        selector: Callable[[pathlib.Path], bool] = lambda _: True,
        mangler: Callable[[pathlib.Path, int], pathlib.Path] = lambda p, _: p,
    ) -> None:
        """Upload TensorBoard files written by user code (MANUAL mode only; AUTO mode raises
        RuntimeError because the files are already synced after every report)."""
        if self._tb_mode == TensorboardMode.AUTO:
            raise RuntimeError(
                "upload_tensorboard_files() is for TensorboardMode.MANUAL; in AUTO mode files "
                "are synced after each report"
            )
        if self._tb_manager is not None:
            self._tb_manager.sync(selector, mangler, self._rank)


class DummyTrainContext(TrainContext):
    """The local TrainContext: reports are logged."""

    def __init__(self, tensorboard_path: pathlib.Path | None = None) -> None:
        super().__init__(
            _LocalTrainBackend(),
            tensorboard_mode=TensorboardMode.MANUAL,
            tensorboard_path=tensorboard_path,
        )
