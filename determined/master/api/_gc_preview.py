"""``GET /experiments/{id}/preview_gc``: which checkpoints a GC policy would delete, in the
shape Determined 0.37's ``det e set gc-policy`` reads before it asks for confirmation (the
reference serves it outside ``/api/v1``; both paths answer here)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from determined.master import experiment, resources
from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.store import CheckpointRow, _checkpoints, _experiments, _metrics, _time

router = APIRouter()


def _entry(conn: Any, ckpt: CheckpointRow) -> dict[str, Any]:
    steps = int(ckpt["steps_completed"])
    out: dict[str, Any] = {
        "UUID": ckpt["uuid"],
        "TrialID": int(ckpt["trial_id"]),
        "StepsCompleted": steps,
        "State": ckpt["state"].removeprefix("STATE_"),
        "ReportTime": _time.rfc3339(ckpt["report_time"]),
        "Resources": dict(ckpt["resources"] or {}),
        "ValidationMetrics": {},
    }
    val = _metrics.at_steps(conn, int(ckpt["trial_id"]), "validation", steps)
    if val is not None:
        out["ValidationMetrics"] = dict(val["metrics"] or {})
        out["step"] = {"validation": {"metrics": {"validation_metrics": out["ValidationMetrics"]}}}
    return out


def _preview(
    experiment_id: int,
    caller: Caller,
    store: StoreDep,
    save_experiment_best: int = Query(..., ge=0),
    save_trial_best: int = Query(..., ge=0),
    save_trial_latest: int = Query(..., ge=0),
) -> dict[str, Any]:
    """``{checkpoints: [...], metric_name}``: the checkpoints the policy would delete."""
    caller.require_user()
    policy = {
        "save_experiment_best": save_experiment_best,
        "save_trial_best": save_trial_best,
        "save_trial_latest": save_trial_latest,
    }
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        if not exp["config"]:
            raise InvalidArgument(f"experiment {experiment_id} has no config")
        doomed = sorted(resources.doomed_by(conn, exp, policy))
        found = [_checkpoints.get(conn, uuid) for uuid in doomed]
        entries = [_entry(conn, c) for c in found if c is not None]
    metric, _ = experiment.searcher_metric(exp["config"])
    return {"checkpoints": entries, "metric_name": metric}


router.add_api_route("/experiments/{experiment_id}/preview_gc", _preview, methods=["GET"])
router.add_api_route("/api/v1/experiments/{experiment_id}/preview_gc", _preview, methods=["GET"])
