"""Metric reports as the SDK returns them (0.37's ``TrialMetrics`` and its two deprecated
subclasses), and the streaming route that yields them."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterator
from typing import Any

from determined.common.api import Session, _routes


def parse_time(text: str | None) -> datetime.datetime | None:
    """An RFC 3339 timestamp from the master (``...Z`` or with an offset), or None."""
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclasses.dataclass
class TrialMetrics:
    """One metrics report of a trial.

    Attributes:
        trial_id, trial_run_id: the trial and the run of it that reported.
        steps_completed: the ``steps_completed`` the report was made at.
        end_time: when it was reported.
        metrics: the reported values, by name.
        group: ``"training"``, ``"validation"`` or any group a trial reported under.
        batch_metrics: per-batch values, when the trial sent them.
    """

    trial_id: int
    trial_run_id: int
    steps_completed: int
    end_time: datetime.datetime | None
    metrics: dict[str, Any]
    group: str
    batch_metrics: list[dict[str, Any]] | None = None

    @classmethod
    def _from_json(cls, report: dict[str, Any], group: str | None = None) -> TrialMetrics:
        values = report.get("metrics") or {}
        group = str(report.get("group") or group or "")
        if group == "validation" and "validation_metrics" in values:
            metrics = values["validation_metrics"]
        else:
            metrics = values.get("avg_metrics", values.get("validation_metrics")) or {}
        return cls(
            trial_id=int(report["trialId"]),
            trial_run_id=int(report.get("trialRunId") or 0),
            steps_completed=int(report.get("totalBatches") or 0),
            end_time=parse_time(report.get("endTime")),
            metrics=dict(metrics),
            group=group,
            batch_metrics=values.get("batch_metrics"),
        )

    @property
    def total_batches(self) -> int:
        """Deprecated in 0.37: ``steps_completed``."""
        return self.steps_completed

    @total_batches.setter
    def total_batches(self, value: int) -> None:
        self.steps_completed = value


class TrainingMetrics(TrialMetrics):
    """Deprecated in 0.37: a ``TrialMetrics`` of the ``training`` group."""

    def __init__(self, total_batches: int | None = None, **kwargs: Any) -> None:
        if total_batches is not None:
            kwargs["steps_completed"] = total_batches
        kwargs["group"] = "training"
        super().__init__(**kwargs)


class ValidationMetrics(TrialMetrics):
    """Deprecated in 0.37: a ``TrialMetrics`` of the ``validation`` group."""

    def __init__(self, total_batches: int | None = None, **kwargs: Any) -> None:
        if total_batches is not None:
            kwargs["steps_completed"] = total_batches
        kwargs["group"] = "validation"
        super().__init__(**kwargs)


def stream_reports(session: Session, trial_ids: list[int], group: str) -> Iterator[dict[str, Any]]:
    """The raw ``v1MetricsReport`` objects of ``group`` of the trials, oldest first; the
    master keeps the stream open until every trial has ended."""
    if not trial_ids:
        raise ValueError("trial_ids is empty: name at least one trial")
    resp = _routes.stream_trials_metrics(session, trial_ids, group)
    with resp:
        for raw in resp.iter_lines():
            if not raw:
                continue
            obj = json.loads(raw)
            if "error" in obj:
                raise RuntimeError(f"metrics stream of trials {trial_ids} failed: {obj['error']}")
            yield from (obj.get("result") or {}).get("metrics") or []


def trials_metrics(session: Session, trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
    """``TrialMetrics`` of ``group`` of the trials (see :func:`stream_reports`)."""
    for report in stream_reports(session, trial_ids, group):
        yield TrialMetrics._from_json(report, group)


def training_metrics(session: Session, trial_ids: list[int]) -> Iterator[TrainingMetrics]:
    for report in stream_reports(session, trial_ids, "training"):
        m = TrialMetrics._from_json(report, "training")
        yield TrainingMetrics(**{**dataclasses.asdict(m), "group": "training"})


def validation_metrics(session: Session, trial_ids: list[int]) -> Iterator[ValidationMetrics]:
    for report in stream_reports(session, trial_ids, "validation"):
        m = TrialMetrics._from_json(report, "validation")
        yield ValidationMetrics(**{**dataclasses.asdict(m), "group": "validation"})
