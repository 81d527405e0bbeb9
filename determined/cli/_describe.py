"""Tables of ``det e describe`` and ``det t describe``: experiments, trials, workloads, alerts."""

from __future__ import annotations

import json
from typing import Any

from determined import errors
from determined.cli import _render
from determined.common.api import Session

_PAGE = 500


def read_paginated(
    sess: Session, path: str, key: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every item of a paginated v1 list (``{<key>: [...], pagination: {endIndex, total}}``)."""
    items: list[dict[str, Any]] = []
    offset = int((params or {}).get("offset") or 0)
    while True:
        query = dict(params or {}, offset=offset)
        query.setdefault("limit", _PAGE)
        body = sess.get(path, params=query).json()
        page = body.get(key) or []
        items.extend(page)
        pagination = body.get("pagination") or {}
        end = int(pagination.get("endIndex") or offset + len(page))
        total = int(pagination.get("total") or 0)
        if not page or end >= total:
            return items
        offset = end


def workloads(sess: Session, trial_id: int) -> list[dict[str, Any]] | None:
    """The trial's workloads; None when the master does not serve them."""
    try:
        return read_paginated(sess, f"/api/v1/trials/{trial_id}/workloads", "workloads")
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


def workload_rows(trial_id: int, items: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per step: training, checkpoint and validation at the same batch merged."""
    rows: dict[int, list[Any]] = {}
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
        row[2] = row[4] or row[6] or row[2]
    return [rows[k] for k in sorted(rows)]


def alerts(sess: Session, experiment_id: int) -> list[dict[str, Any]]:
    """The experiment's alerts (``core.Context.alert()``); [] from a master without them."""
    try:
        body = sess.get(f"/api/v1/experiments/{experiment_id}/alerts").json()
    except errors.MasterNotFound:
        return []
    return list(body.get("alerts") or [])


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


def print_experiments(sess: Session, exps: list[dict[str, Any]], *, as_csv: bool = False) -> None:
    """The sections of ``det e describe``: Experiment, Trials, Workloads, and Alerts when a
    trial raised any (a section 0.37 does not print)."""
    print("Experiment:")
    _render.table(EXPERIMENT_HEADERS, [experiment_row(e) for e in exps], as_csv=as_csv)
    trials = [
        t
        for e in exps
        for t in read_paginated(sess, f"/api/v1/experiments/{e['id']}/trials", "trials")
    ]
    print("\nTrials:")
    _render.table(TRIAL_HEADERS, [trial_row(t) for t in trials], as_csv=as_csv)
    rows: list[list[Any]] = []
    served = True
    for t in trials:
        items = workloads(sess, int(t["id"]))
        if items is None:
            served = False
            continue
        rows += workload_rows(int(t["id"]), items)
    print("\nWorkloads:")
    if served:
        _render.table(WORKLOAD_HEADERS, rows, as_csv=as_csv)
    else:
        print("(this master does not serve GET /api/v1/trials/{id}/workloads yet)")
    raised = [a for e in exps for a in alerts(sess, int(e["id"]))]
    if raised:
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


def trial_workload_table(items: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    headers = [
        "# of Batches",
        "Report Time",
        "Checkpoint",
        "Checkpoint UUID",
        "Checkpoint Metadata",
        "Validation Metrics",
    ]
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
        )
    return headers, rows
