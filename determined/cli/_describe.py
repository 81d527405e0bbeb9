"""Tables of ``det e describe`` and ``det t describe``: experiments, trials, workloads, alerts."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from determined import errors
from determined.cli import _render
from determined.common.api import Session, _routes
from determined.experimental._sdk import _paging

_PAGE = 500


def read_paginated(
    get_page: Callable[[int, int], dict[str, Any]],
    key: str,
    paging: Any = None,
    *,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Every item of a paginated v1 list (``get_page(offset, limit)``: ``{<key>: [...],
    pagination: {endIndex, total}}``); with ``paging`` (parsed :func:`add_pagination_args`
    flags), from ``--offset`` in pages of ``--limit``, and only the first page with
    ``--pages 1``."""
    size = int(getattr(paging, "limit", 0) or limit or _PAGE)
    pages = _paging.read_paginated(
        lambda offset: get_page(offset, size),
        key,
        single=getattr(paging, "pages", "all") == "1",
        start=int(getattr(paging, "offset", 0) or 0),
    )
    return list(pages)


def experiment_trials(sess: Session, experiment_id: int) -> Callable[[int, int], dict[str, Any]]:
    """The pager of the experiment's trials, for :func:`read_paginated`."""

    def page(offset: int, limit: int) -> dict[str, Any]:
        return _routes.list_experiment_trials(sess, experiment_id, offset=offset, limit=limit)

    return page


def add_pagination_args(p: Any, limit: int = 200) -> None:
    """0.37's ``--limit``, ``--offset`` and ``--pages all|1``."""
    p.add_argument("--limit", type=int, default=limit, help="maximum items per page of results")
    p.add_argument("--offset", type=int, default=0, help="items to skip before the first page")
    p.add_argument(
        "--pages",
        choices=("all", "1"),
        default="all",
        help="'all': fetch every page; '1': only the first",
    )


def workloads(
    sess: Session, trial_id: int, paging: Any = None, *, batch_metrics: bool = False
) -> list[dict[str, Any]] | None:
    """The trial's workloads (with each training workload's per-batch metrics when asked);
    None when the master does not serve them."""

    def page(offset: int, limit: int) -> dict[str, Any]:
        return _routes.list_trial_workloads(
            sess, trial_id, include_batch_metrics=batch_metrics, offset=offset, limit=limit
        )

    try:
        return read_paginated(page, "workloads", paging)
    except errors.MasterNotFound:
        return None


EXPERIMENT_HEADERS = [
    "Experiment ID",
    "State",
    "Progress",
    "Started",
    "Ended",
    "Name",
    "Description",
    "Archived",
    "Resource Pool",
    "Labels",
]


def experiment_row(exp: dict[str, Any]) -> list[Any]:
    return [
        exp.get("id"),
        _render.strip_state(exp.get("state")),
        _render.format_percent(exp.get("progress")),
        _render.format_time(exp.get("startTime")),
        _render.format_time(exp.get("endTime")),
        exp.get("name"),
        exp.get("description"),
        exp.get("archived"),
        exp.get("resourcePool"),
        ", ".join(sorted(exp.get("labels") or [])),
    ]


TRIAL_HEADERS = ["Trial ID", "Experiment ID", "State", "Started", "Ended", "H-Params"]


def trial_row(trial: dict[str, Any]) -> list[Any]:
    return [
        trial.get("id"),
        trial.get("experimentId"),
        _render.strip_state(trial.get("state")),
        _render.format_time(trial.get("startTime")),
        _render.format_time(trial.get("endTime")),
        json.dumps(trial.get("hparams"), indent=4),
    ]


WORKLOAD_HEADERS = [
    "Trial ID",
    "# of Batches",
    "State",
    "Report Time",
    "Checkpoint State",
    "Checkpoint Report Time",
    "Validation State",
    "Validation Report Time",
]


def workload_rows(
    trial_id: int,
    items: list[dict[str, Any]],
    training_names: Sequence[str] = (),
    validation_names: Sequence[str] = (),
) -> list[list[Any]]:
    """One row per step: training, checkpoint and validation at the same batch merged; with
    metric names, their values (training ones after the report time, validation ones last),
    as ``det e describe --metrics``."""
    rows: dict[int, list[Any]] = {}
    t_metrics: dict[int, dict[str, Any]] = {}
    v_metrics: dict[int, dict[str, Any]] = {}
    for item in items:
        detail = item.get("training") or item.get("validation") or item.get("checkpoint") or {}
        batches = int(detail.get("totalBatches") or 0)
        when = _render.format_time(detail.get("endTime"))
        row = rows.setdefault(batches, [trial_id, batches, "", when, "", None, "", None])
        if when and (row[3] is None or when > row[3]):
            row[3] = when
        if item.get("checkpoint"):
            row[4] = _render.strip_state(item["checkpoint"].get("state"))
            row[5] = when
        if item.get("validation"):
            row[6] = "COMPLETED"
            row[7] = when
            v_metrics[batches] = _avg(item["validation"])
        if item.get("training"):
            t_metrics[batches] = _avg(item["training"])
        row[2] = row[4] or row[6] or row[2]
    out = []
    for k in sorted(rows):
        row = rows[k]
        train = [t_metrics.get(k, {}).get(n) for n in training_names]
        valid = [v_metrics.get(k, {}).get(n) for n in validation_names]
        out.append(row[:4] + train + row[4:] + valid)
    return out


def _avg(workload: dict[str, Any]) -> dict[str, Any]:
    return dict((workload.get("metrics") or {}).get("avgMetrics") or {})


def scalar_metric_names(items: list[dict[str, Any]], kind: str) -> list[str]:
    """The names of the numeric ``kind`` ("training" or "validation") metrics in workloads."""
    names = set()
    for item in items:
        if item.get(kind):
            for name, value in _avg(item[kind]).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    names.add(name)
    return sorted(names)


def alerts(sess: Session, experiment_id: int) -> list[dict[str, Any]]:
    """The experiment's alerts (``core.Context.alert()``); [] from a master without them."""
    try:
        return _routes.list_experiment_alerts(sess, experiment_id)
    except errors.MasterNotFound:
        return []


ALERT_HEADERS = ["Experiment ID", "Trial ID", "Time", "Level", "Title", "Description"]


def alert_row(alert: dict[str, Any]) -> list[Any]:
    return [
        alert.get("experimentId"),
        alert.get("trialId"),
        _render.format_time(alert.get("createdAt")),
        str(alert.get("level") or "").removeprefix("LOG_LEVEL_"),
        alert.get("title"),
        alert.get("description"),
    ]


def print_experiments(
    sess: Session,
    exps: list[dict[str, Any]],
    *,
    as_csv: bool = False,
    metrics: bool = False,
    outdir: pathlib.Path | None = None,
) -> None:
    """The sections of ``det e describe``: Experiment, Trials, Workloads (with ``metrics``, a
    column per scalar metric), and Alerts when a trial raised any (a section 0.37 does not
    print). With ``outdir``, each section goes to its CSV file there instead, as 0.37's
    ``--outdir`` (``experiments.csv``, ``trials.csv``, ``workloads.csv``)."""
    if outdir is not None:
        outdir.mkdir(parents=True, exist_ok=True)

    def section(title: str, name: str, headers: list[str], rows: list[list[Any]]) -> None:
        if outdir is None:
            print(title)
            _render.table(headers, rows, as_csv=as_csv)
            return
        with (outdir / name).open("w", newline="") as f:
            _render.table(headers, rows, as_csv=True, out=f)

    section("Experiment:", "experiments.csv", EXPERIMENT_HEADERS, [experiment_row(e) for e in exps])
    trials = [
        t for e in exps for t in read_paginated(experiment_trials(sess, int(e["id"])), "trials")
    ]
    section("\nTrials:", "trials.csv", TRIAL_HEADERS, [trial_row(t) for t in trials])
    per_trial = {int(t["id"]): workloads(sess, int(t["id"])) for t in trials}
    if any(items is None for items in per_trial.values()):
        print("\nWorkloads:\n(this master does not serve GET /api/v1/trials/{id}/workloads yet)")
    else:
        every = [w for items in per_trial.values() for w in items or []]
        t_names = scalar_metric_names(every, "training") if metrics else []
        v_names = scalar_metric_names(every, "validation") if metrics else []
        headers = (
            WORKLOAD_HEADERS[:4]
            + [f"Training Metric: {n}" for n in t_names]
            + WORKLOAD_HEADERS[4:]
            + [f"Validation Metric: {n}" for n in v_names]
        )
        rows = [
            row
            for trial_id, items in per_trial.items()
            for row in workload_rows(trial_id, items or [], t_names, v_names)
        ]
        section("\nWorkloads:", "workloads.csv", headers, rows)
    raised = [a for e in exps for a in alerts(sess, int(e["id"]))]
    if raised and outdir is None:
        print("\nAlerts:")
        _render.table(ALERT_HEADERS, [alert_row(a) for a in raised], as_csv=as_csv)


TRIAL_DESCRIBE_HEADERS = [
    "Experiment ID",
    "State",
    "H-Params",
    "Summary Metrics",
    "Started",
    "Ended",
]


def _checkpoint_cells(ckpt: dict[str, Any] | None) -> list[Any]:
    if not ckpt:
        return [None, None, None]
    state = _render.strip_state(ckpt.get("state"))
    uuid = ckpt.get("uuid") if state in ("COMPLETED", "DELETED") else None
    return [state, uuid, json.dumps(ckpt.get("metadata"), indent=4)]


def trial_workload_table(
    items: list[dict[str, Any]], *, metrics: bool = False
) -> tuple[list[str], list[list[Any]]]:
    """``det t describe``'s workloads; ``metrics`` adds each training workload's metrics."""
    headers = [
        "# of Batches",
        "Report Time",
        "Checkpoint",
        "Checkpoint UUID",
        "Checkpoint Metadata",
        "Validation Metrics",
    ] + (["Workload Metrics"] if metrics else [])
    rows = []
    for item in items:
        detail = item.get("training") or item.get("validation") or item.get("checkpoint") or {}
        validation = item.get("validation")
        rows.append(
            [
                detail.get("totalBatches"),
                _render.format_time(detail.get("endTime")),
                *_checkpoint_cells(item.get("checkpoint")),
                json.dumps(validation.get("metrics"), indent=4) if validation else None,
            ]
            + (
                [json.dumps(item["training"].get("metrics"), indent=4)]
                if metrics and item.get("training")
                else [None] * metrics
            )
        )
    return headers, rows


# ``det e list`` and ``det p list-experiments``: one row per experiment, as 0.37's.
EXPERIMENT_LIST_HEADERS = [
    "ID",
    "Owner",
    "Name",
    "Parent ID",
    "State",
    "Progress",
    "Started",
    "Ended",
    "Resource Pool",
]


def experiment_list_row(e: dict[str, Any]) -> list[Any]:
    return [
        e.get("id"),
        e.get("username"),
        e.get("name"),
        e.get("forkedFrom"),
        _render.strip_state(e.get("state")),
        _render.format_percent(e.get("progress")),
        _render.format_time(e.get("startTime")),
        _render.format_time(e.get("endTime")),
        e.get("resourcePool"),
    ]
