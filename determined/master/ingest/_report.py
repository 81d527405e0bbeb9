"""One metric report's write, and runs of them written together (the group commit's batch)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, cast

import sqlalchemy as sa

from determined.master import experiment
from determined.master.store import _experiments, _metrics, _trials
from determined.master.store._rows import TrialRow


class Report(NamedTuple):
    """One metric report, checked and parsed by the route that took it; plain data, so that
    the write worker gets it as it is."""

    trial_id: int
    group: str
    run_id: int
    steps: int
    avg: dict[str, Any]
    batch: list[Any] | None
    when: datetime.datetime | None

    def columns(self) -> dict[str, Any]:
        """What ``_metrics.report`` and ``ReportBatch.add`` take of it."""
        return {
            "group": self.group,
            "run_id": self.run_id,
            "steps_completed": self.steps,
            "avg_metrics": self.avg,
            "batch_metrics": self.batch,
            "report_time": self.when,
        }


class MetricsHook(Protocol):
    """Told of each stored report in its transaction (``Webhooks``: metric thresholds)."""

    def metrics_reported(
        self, conn: sa.Connection, trial_id: int, group: str, metrics: dict[str, Any]
    ) -> None: ...


class ReportWrite:
    """The write storing one report; ``hooks`` sees the metrics in the same transaction
    (metric threshold webhooks). Called with a connection it writes alone; ``write_reports``
    writes many at once."""

    def __init__(self, report: Report, hooks: MetricsHook | None = None) -> None:
        self.report, self.hooks = report, hooks

    def __call__(self, conn: sa.Connection) -> None:
        r = self.report
        trial = _trials.require_trial(conn, r.trial_id)
        metric, smaller = None, True
        # Only validations and rollbacks (a later run) use the searcher metric: training
        # reports of a first run skip reading (and parsing) the experiment's config.
        if r.group == "validation" or int(trial["run_id"]) > 1:
            exp = _experiments.require_experiment(conn, trial["experiment_id"])
            metric, smaller = experiment.searcher_metric(exp["config"])
        _metrics.report(
            conn, trial, **r.columns(), searcher_metric=metric, smaller_is_better=smaller
        )
        self.notify_hooks(conn)

    def notify_hooks(self, conn: sa.Connection) -> None:
        if self.hooks is not None:
            r = self.report
            self.hooks.metrics_reported(conn, r.trial_id, r.group, r.avg)


def write_reports(
    conn: sa.Connection,
    writes: list[Callable[[sa.Connection], Any]],
    known: dict[int, TrialRow] | None = None,
) -> list[Any]:
    """Consecutive reports of one group commit, as each would be written alone, in order:
    the common ones through one ``ReportBatch`` (``known``: its trial rows kept from earlier
    commits, see ``ReportBatch``), the others one by one."""
    reports = [cast(ReportWrite, w) for w in writes]
    keys = [(w.report.trial_id, w.report.group, w.report.steps) for w in reports]
    batch = _metrics.ReportBatch(conn, keys, known)
    taken: list[ReportWrite] = []
    for w in reports:
        r = w.report
        if batch.add(r.trial_id, **r.columns()):
            taken.append(w)
            continue
        _flush(conn, batch, taken)
        w(conn)
        batch.reload(r.trial_id, r.group, r.steps)
    _flush(conn, batch, taken)
    return [None] * len(reports)


def _flush(conn: sa.Connection, batch: _metrics.ReportBatch, taken: list[ReportWrite]) -> None:
    batch.flush()
    for w in taken:
        w.notify_hooks(conn)
    taken.clear()
