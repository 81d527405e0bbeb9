"""Trial metrics: the run-id check, the post-restart rollback, merging reports, and the
per-trial summaries (``summaryMetrics``, ``totalBatchesProcessed``, latest/best validation).

Rules (docs/reference/master.md §3.2):

- A report must come from the trial's current run (``trialRunId``); others are stale: 400.
- Before storing, rows of *older* runs at or past ``stepsCompleted`` in the same partition
  (training / validation / everything else), or strictly past it in the other partitions, are
  archived: the restarted trial redoes that work and its new reports replace them.
- A report for the same (group, steps) as a stored row merges its keys into that row; a key
  reported again with a different value, or a second ``batchMetrics``, is a 400. The same key
  with the same value is accepted and changes nothing, so a retried report is harmless.
"""

from __future__ import annotations

import datetime
import functools
import math
import numbers
from collections.abc import Iterable
from typing import Any, cast

import sqlalchemy as sa

from determined.master._errors import InvalidArgument
from determined.master.store import _engine, _time, _trials
from determined.master.store._engine import ManyRows, inserted_id
from determined.master.store._enums import Partition
from determined.master.store._rows import TrialRow
from determined.master.store._schema import metrics, trials

SUMMARY_KEYS = {"training": "avg_metrics", "validation": "validation_metrics"}


def validate_group(group: str) -> None:
    if not group:
        raise InvalidArgument("metric group must be non-empty (for example 'training')")
    if "." in group:
        raise InvalidArgument(f"metric group {group!r} must not contain '.'")


def report(
    conn: sa.Connection,
    trial: TrialRow,
    *,
    group: str,
    run_id: int,
    steps_completed: int,
    avg_metrics: dict[str, Any],
    batch_metrics: list[Any] | None,
    report_time: datetime.datetime | None,
    searcher_metric: str | None,
    smaller_is_better: bool = True,
) -> int:
    """Store one report for ``trial`` (a trials row); returns the metrics row id.

    Raises:
        InvalidArgument: bad group, stale run id, non-numeric ``epoch``, or a conflicting key.
    """
    _check(trial, group, run_id, steps_completed, avg_metrics)
    partition = Partition.of(group)
    # The first run has no older runs to roll back: skip the UPDATE on the hot path.
    if run_id > 1 and _rollback(conn, trial["id"], run_id, partition, steps_completed):
        recompute(conn, trial["id"], searcher_metric, smaller_is_better)
        trial = _trials.require_trial(conn, trial["id"])
    when = report_time or _time.now()
    existing = _current_row(conn, trial["id"], group, steps_completed)
    if existing is None:
        row_id = _insert(
            conn, trial, group, partition, steps_completed, avg_metrics, batch_metrics, when
        )
        new_keys = dict(avg_metrics)
    else:
        row_id, new_keys = _merge(conn, existing, avg_metrics, batch_metrics, when)
    _update_trial(
        conn, trial, group, steps_completed, row_id, new_keys, searcher_metric, smaller_is_better
    )
    return row_id


def _check(
    trial: TrialRow, group: str, run_id: int, steps: int, avg_metrics: dict[str, Any]
) -> None:
    """InvalidArgument unless the report may be stored (before looking at stored rows)."""
    validate_group(group)
    if run_id != trial["run_id"]:
        raise InvalidArgument(
            f"invalid run id {run_id} for trial {trial['id']}: its current run is "
            f"{trial['run_id']} (this report comes from a stale process)"
        )
    if "epoch" in avg_metrics and not _is_number(avg_metrics["epoch"]):
        raise InvalidArgument(f"metric 'epoch' must be a number, not {avg_metrics['epoch']!r}")
    if steps < 0:
        raise InvalidArgument(f"stepsCompleted must be >= 0, not {steps}")


def _is_number(v: Any) -> bool:
    if type(v) in (float, int):  # the common case, without the ABC's isinstance machinery
        return True
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _rollback(
    conn: sa.Connection, trial_id: int, run_id: int, partition: Partition, steps: int
) -> bool:
    same = sa.and_(metrics.c.partition == partition.value, metrics.c.steps_completed >= steps)
    other = sa.and_(metrics.c.partition != partition.value, metrics.c.steps_completed > steps)
    result = conn.execute(
        metrics.update()
        .where(
            metrics.c.trial_id == trial_id,
            metrics.c.archived.is_(False),
            metrics.c.trial_run_id < run_id,
            sa.or_(same, other),
        )
        .values(archived=True)
    )
    return bool(result.rowcount)


# Built once: constructing a Core statement costs more than running it on the hot path.
_CURRENT_ROW = sa.select(metrics).where(
    metrics.c.trial_id == sa.bindparam("trial_id"),
    metrics.c.metric_group == sa.bindparam("group"),
    metrics.c.steps_completed == sa.bindparam("steps"),
    metrics.c.archived.is_(False),
)
_INSERT = metrics.insert()
# Columns come from the parameters: UPDATE trials SET <given keys> WHERE id = :trial_row_id.
_UPDATE_TRIAL = trials.update().where(trials.c.id == sa.bindparam("trial_row_id"))


def _current_row(
    conn: sa.Connection, trial_id: int, group: str, steps: int
) -> dict[str, Any] | None:
    params = {"trial_id": trial_id, "group": group, "steps": steps}
    row = conn.execute(_CURRENT_ROW, params).mappings().first()
    return None if row is None else dict(row)


def _insert(
    conn: sa.Connection,
    trial: TrialRow,
    group: str,
    partition: Partition,
    steps: int,
    avg: dict[str, Any],
    batch: list[Any] | None,
    when: datetime.datetime,
) -> int:
    row = conn.execute(_INSERT, _new_row(trial, group, partition, steps, avg, batch, when))
    return inserted_id(row)


def _new_row(
    trial: TrialRow,
    group: str,
    partition: Partition,
    steps: int,
    avg: dict[str, Any],
    batch: list[Any] | None,
    when: datetime.datetime,
) -> dict[str, Any]:
    return {
        "trial_id": trial["id"],
        "trial_run_id": trial["run_id"],
        "metric_group": group,
        "partition": partition.value,
        "steps_completed": steps,
        "metrics": avg,
        "batch_metrics": batch,
        "report_time": when,
        "archived": False,
    }


def _merge(
    conn: sa.Connection,
    row: dict[str, Any],
    avg: dict[str, Any],
    batch: list[Any] | None,
    when: datetime.datetime,
) -> tuple[int, dict[str, Any]]:
    old = dict(row["metrics"])
    for key, value in avg.items():
        if key in old and old[key] != value:
            raise InvalidArgument(
                f"metric {key!r} of group {row['metric_group']!r} at step "
                f"{row['steps_completed']} was already reported as {old[key]!r}; "
                f"it cannot change to {value!r}"
            )
    if batch is not None and row["batch_metrics"] is not None and batch != row["batch_metrics"]:
        raise InvalidArgument(
            f"batchMetrics of group {row['metric_group']!r} at step {row['steps_completed']} "
            "were already reported; report them once per step"
        )
    new_keys = {k: v for k, v in avg.items() if k not in old}
    if new_keys or (batch is not None and row["batch_metrics"] is None):
        values: dict[str, Any] = {"metrics": {**old, **new_keys}, "report_time": when}
        if batch is not None:
            values["batch_metrics"] = batch
        conn.execute(metrics.update().where(metrics.c.id == row["id"]).values(**values))
    return int(row["id"]), new_keys


def _update_trial(
    conn: sa.Connection,
    trial: TrialRow,
    group: str,
    steps: int,
    row_id: int,
    new_keys: dict[str, Any],
    searcher_metric: str | None,
    smaller_is_better: bool,
) -> None:
    values = _summary_changes(trial, group, steps, new_keys)
    if group == "validation" and searcher_metric and searcher_metric in new_keys:
        values["latest_validation_id"] = row_id
        value = new_keys[searcher_metric]
        best = _metric_of(conn, trial["best_validation_id"], searcher_metric)
        if _is_number(value) and (best is None or _better(value, best, smaller_is_better)):
            values["best_validation_id"] = row_id
    if values:
        conn.execute(_UPDATE_TRIAL, {"trial_row_id": trial["id"], **values})


def _summary_changes(
    trial: TrialRow, group: str, steps: int, new_keys: dict[str, Any]
) -> dict[str, Any]:
    """The trial's columns a report of ``new_keys`` changes, but the validation pointers."""
    values: dict[str, Any] = {}
    if new_keys:
        summary = dict(trial["summary_metrics"] or {})
        key = SUMMARY_KEYS.get(group, group)
        summary[key] = add_to_summary(dict(summary.get(key) or {}), new_keys)
        values["summary_metrics"] = summary
    if group == "training" and steps > trial["total_batches"]:
        values["total_batches"] = steps
    return values


# A batch's writes, past SQLAlchemy's per-row work (see ManyRows): the new rows (every column
# but the id: the keys of _new_row), and per set of changed columns, the trials' updates.
ROW_KEYS = tuple(c.name for c in metrics.c if c.name != "id")
_INSERT_MANY = ManyRows(_INSERT, ROW_KEYS)


@functools.cache
def _update_trials_many(columns: tuple[str, ...]) -> ManyRows:
    return ManyRows(_UPDATE_TRIAL, (*columns, "trial_row_id"))


# What a batch reads of each trial: all that _check, _new_row and _summary_changes use.
_BATCH_TRIAL_COLUMNS = (
    trials.c.id,
    trials.c.run_id,
    trials.c.summary_metrics,
    trials.c.total_batches,
)


class ReportBatch:
    """Many reports of one transaction stored with a few statements for all of them: one
    read of their trials and of the rows they could merge into, one multi-row insert, one
    update per changed trial (``flush``). What :func:`report` would do for each, in order.

    Only the common case is taken (:meth:`add` says which): a new row, outside validation,
    of a trial's first run. The caller stores any other report with :func:`report` after a
    :meth:`flush`, then tells the batch with :meth:`reload`.

    Args:
        conn: the transaction.
        keys: (trial id, group, steps completed) of every report the batch may see.
        known: trial rows (at least the batch's columns) as the database holds them at the
            start of this transaction, kept from earlier batches; only the others are read.
            The batch reads into it and changes its rows as it writes them, so once the
            transaction commits it still holds what the database holds (the caller drops it
            if the transaction does not commit).
    """

    def __init__(
        self,
        conn: sa.Connection,
        keys: list[tuple[int, str, int]],
        known: dict[int, TrialRow] | None = None,
    ) -> None:
        self.conn = conn
        self._trials: dict[int, TrialRow] = {} if known is None else known
        ids = sorted({k[0] for k in keys if k[0] not in self._trials})
        if ids:
            query = sa.select(*_BATCH_TRIAL_COLUMNS).where(trials.c.id.in_(ids))
            for r in conn.execute(query).mappings():
                self._trials[int(r["id"])] = cast(TrialRow, dict(r))
        # A live training row is never past its trial's total_batches (the largest steps of
        # its training rows): a training report past it needs no look for a row to merge into.
        unknown = [
            k
            for k in keys
            if k[0] in self._trials
            and not (k[1] == "training" and k[2] > self._trials[k[0]]["total_batches"])
        ]
        self._stored: set[tuple[int, str, int]] = set()
        if unknown:
            live = sa.select(metrics.c.trial_id, metrics.c.metric_group, metrics.c.steps_completed)
            live = live.where(
                metrics.c.trial_id.in_(sorted({k[0] for k in unknown})),
                metrics.c.steps_completed.in_(sorted({k[2] for k in unknown})),
                metrics.c.archived.is_(False),
            )
            self._stored = {(int(t), str(g), int(n)) for t, g, n in conn.execute(live)}
        self._rows: list[dict[str, Any]] = []
        self._changed: dict[int, dict[str, Any]] = {}

    def add(
        self,
        trial_id: int,
        *,
        group: str,
        run_id: int,
        steps_completed: int,
        avg_metrics: dict[str, Any],
        batch_metrics: list[Any] | None,
        report_time: datetime.datetime | None,
    ) -> bool:
        """Take the report (written at :meth:`flush`) if it is the common case; False: it was
        not taken, nothing changed.

        Raises:
            InvalidArgument: as :func:`report` would for it.
        """
        trial = self._trials.get(trial_id)
        key = (trial_id, group, steps_completed)
        if trial is None or group == "validation" or run_id != 1 or key in self._stored:
            return False
        _check(trial, group, run_id, steps_completed, avg_metrics)
        when = report_time or _time.now()
        partition = Partition.of(group)
        self._rows.append(
            _new_row(trial, group, partition, steps_completed, avg_metrics, batch_metrics, when)
        )
        self._stored.add(key)
        changes = _summary_changes(trial, group, steps_completed, dict(avg_metrics))
        trial.update(changes)  # type: ignore[typeddict-item]
        self._changed.setdefault(trial_id, {}).update(changes)
        return True

    def flush(self) -> None:
        """Write what :meth:`add` took."""
        _INSERT_MANY.run(self.conn, self._rows)
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for trial_id, changes in self._changed.items():
            if changes:
                params = {"trial_row_id": trial_id, **changes}
                by_columns.setdefault(tuple(sorted(changes)), []).append(params)
        for columns, many in by_columns.items():
            _update_trials_many(columns).run(self.conn, many)
        self._rows, self._changed = [], {}

    def reload(self, trial_id: int, group: str, steps_completed: int) -> None:
        """After :func:`report` stored (group, steps) of ``trial_id`` outside the batch."""
        trial = _trials.get_trial(self.conn, trial_id)
        if trial is not None:
            self._trials[trial_id] = trial
        self._stored.add((trial_id, group, steps_completed))


def _better(a: float, b: float, smaller_is_better: bool) -> bool:
    return a < b if smaller_is_better else a > b


def _metric_of(conn: sa.Connection, row_id: int | None, name: str) -> float | None:
    if row_id is None:
        return None
    row = conn.execute(sa.select(metrics.c.metrics).where(metrics.c.id == row_id)).first()
    value = None if row is None else row[0].get(name)
    return float(value) if value is not None and _is_number(value) else None


def add_to_summary(summary: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Fold one report's values into a group's summary (``{name: {type, count, ...}}``)."""
    # This runs for every key of every report (a quarter of the write worker's CPU): each
    # entry is one new dict built at once, with no call that an expression can replace.
    for name, value in values.items():
        old = summary.get(name) or {}
        plain = type(value)
        if (plain is float or plain is int or _is_number(value)) and math.isfinite(
            number := float(value)
        ):
            if old.get("type") == "number":
                count, total = old["count"] + 1, old["sum"] + number
                low, high = old.get("min", number), old.get("max", number)
                low = low if low < number else number  # min(number, low), ties to number
                high = high if high > number else number
            else:
                old, count, total, low, high = {}, 1, 0.0 + number, number, number
            summary[name] = {
                **old,
                "type": "number",
                "count": count,
                "sum": total,
                "min": low,
                "max": high,
                "mean": total / count,
                "last": value,
            }
            continue
        kind = {bool: "boolean", str: "string"}.get(type(value), "object")
        entry: dict[str, Any] = dict(old) if old.get("type") == kind else {"type": kind, "count": 0}
        entry["count"] += 1
        entry["last"] = value
        summary[name] = entry
    return summary


def recompute(
    conn: sa.Connection, trial_id: int, searcher_metric: str | None, smaller_is_better: bool
) -> None:
    """Rebuild a trial's summaries from its live rows (after a rollback archived some)."""
    q = (
        sa.select(metrics)
        .where(metrics.c.trial_id == trial_id, metrics.c.archived.is_(False))
        .order_by(metrics.c.steps_completed, metrics.c.id)
    )
    summary: dict[str, Any] = {}
    total, latest, best, best_value = 0, None, None, None
    for row in conn.execute(q).mappings():
        group = row["metric_group"]
        key = SUMMARY_KEYS.get(group, group)
        summary[key] = add_to_summary(dict(summary.get(key) or {}), row["metrics"])
        if group == "training":
            total = max(total, int(row["steps_completed"]))
        if group == "validation" and searcher_metric and searcher_metric in row["metrics"]:
            latest = row["id"]
            value = row["metrics"][searcher_metric]
            if _is_number(value) and (
                best_value is None or _better(value, best_value, smaller_is_better)
            ):
                best, best_value = row["id"], value
    _trials.update_trial(
        conn,
        trial_id,
        summary_metrics=summary,
        total_batches=total,
        latest_validation_id=latest,
        best_validation_id=best,
    )


def rows_by_id(conn: sa.Connection, row_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """``get_row`` for many rows: those that exist, by id."""
    return _engine.rows_by_id(conn, metrics, row_ids)


def get_row(conn: sa.Connection, row_id: int | None) -> dict[str, Any] | None:
    if row_id is None:
        return None
    row = conn.execute(sa.select(metrics).where(metrics.c.id == row_id)).mappings().first()
    return None if row is None else dict(row)


def at_steps(conn: sa.Connection, trial_id: int, group: str, steps: int) -> dict[str, Any] | None:
    """The live row of ``group`` at ``steps`` (a checkpoint's matching metrics)."""
    return _current_row(conn, trial_id, group, steps)


def list_rows(
    conn: sa.Connection, trial_id: int, group: str | None = None, *, archived: bool = False
) -> list[dict[str, Any]]:
    """A trial's rows in step order (live ones unless ``archived``)."""
    q = sa.select(metrics).where(metrics.c.trial_id == trial_id)
    if not archived:
        q = q.where(metrics.c.archived.is_(False))
    if group is not None:
        q = q.where(metrics.c.metric_group == group)
    q = q.order_by(metrics.c.steps_completed, metrics.c.id)
    return [dict(r) for r in conn.execute(q).mappings()]


def best_experiment_validation(
    conn: sa.Connection, experiment_id: int, searcher_metric: str, smaller_is_better: bool
) -> float | None:
    """The best searcher metric over the experiment's live validations, or None."""
    q = (
        sa.select(metrics.c.metrics)
        .join(trials, trials.c.best_validation_id == metrics.c.id)
        .where(trials.c.experiment_id == experiment_id)
    )
    values = [r[0].get(searcher_metric) for r in conn.execute(q)]
    numbers_ = [float(v) for v in values if _is_number(v)]
    if not numbers_:
        return None
    return min(numbers_) if smaller_is_better else max(numbers_)


def workload_json(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """``v1MetricsWorkload`` for a metrics row (latestValidation / bestValidation)."""
    if row is None:
        return None
    return {
        "endTime": _time.rfc3339(row["report_time"]),
        "metrics": {"avgMetrics": row["metrics"], "batchMetrics": row["batch_metrics"]},
        "numInputs": 0,
        "totalBatches": int(row["steps_completed"]),
    }
