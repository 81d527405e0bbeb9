"""Alerts and run metadata a trial posts about itself: ``core.Context.alert()`` goes to 0.37's
custom webhook trigger (``POST /api/v1/webhooks/custom``), ``TrainContext.set_metadata()`` /
``get_metadata()`` to ``/api/v1/runs/{id}/metadata`` (docs/reference/master.md §3.2).

Here an alert also goes to the experiment's CUSTOM webhook triggers (``determined.master.
webhooks``), and is stored and shown by the web UI and ``det e describe``, read back with
``GET /api/v1/experiments/{id}/alerts``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep, WebhooksDep
from determined.master.api._models import PostAlert, PostRunMetadata
from determined.master.store import _alerts, _experiments, _run_metadata, _trials

router = APIRouter(prefix="/api/v1")

# v1LogLevel names an alert may carry (UNSPECIFIED and missing are stored as INFO).
LEVELS = (
    "LOG_LEVEL_TRACE",
    "LOG_LEVEL_DEBUG",
    "LOG_LEVEL_INFO",
    "LOG_LEVEL_WARNING",
    "LOG_LEVEL_ERROR",
    "LOG_LEVEL_CRITICAL",
)


def _level(value: str | None) -> str:
    if value in (None, "", "LOG_LEVEL_UNSPECIFIED"):
        return "LOG_LEVEL_INFO"
    if value not in LEVELS:
        raise InvalidArgument(f"alert level {value!r} is not one of {', '.join(LEVELS)}")
    return value


@router.post("/webhooks/custom")
def post_alert(
    body: PostAlert, caller: Caller, store: StoreDep, hooks: WebhooksDep
) -> dict[str, Any]:
    caller.check_experiment(body.experiment_id)
    trial_id = body.trial_id or None  # the gateway sends 0 for "no trial"
    if trial_id is not None:
        caller.check_trial(trial_id)
    level = _level(body.data.level)
    with store.tx() as conn:
        _experiments.require_experiment(conn, body.experiment_id)
        if trial_id is not None:
            trial = _trials.require_trial(conn, trial_id)
            if int(trial["experiment_id"]) != body.experiment_id:
                raise InvalidArgument(
                    f"trial {trial_id} belongs to experiment {trial['experiment_id']}, "
                    f"not {body.experiment_id}"
                )
        _alerts.add(
            conn,
            experiment_id=body.experiment_id,
            trial_id=trial_id,
            level=level,
            title=body.data.title,
            description=body.data.description,
        )
        data = {"title": body.data.title, "description": body.data.description, "level": level}
        hooks.custom_alert(conn, body.experiment_id, trial_id, data)
    return {}


@router.get("/experiments/{experiment_id}/alerts")
def list_alerts(
    experiment_id: int,
    caller: Caller,
    store: StoreDep,
    trial_id: int | None = Query(None, alias="trialId"),
) -> dict[str, Any]:
    """The experiment's alerts, oldest first (one trial's with ``?trialId=``)."""
    caller.check_experiment(experiment_id)
    with store.read() as conn:
        _experiments.require_experiment(conn, experiment_id)
        return {"alerts": _alerts.list_for_experiment(conn, experiment_id, trial_id)}


@router.post("/runs/{run_id}/metadata")
def post_run_metadata(
    run_id: int, body: PostRunMetadata, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Replace the run's (trial's) metadata; answers it back as 0.37 does."""
    caller.check_trial(run_id)
    if body.run_id not in (None, 0, run_id):
        raise InvalidArgument(f"metadata for run {body.run_id} posted to run {run_id}")
    with store.tx() as conn:
        _trials.require_trial(conn, run_id)
        _run_metadata.replace(conn, run_id, body.metadata)
    return {"metadata": body.metadata}


@router.get("/runs/{run_id}/metadata")
def get_run_metadata(run_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    caller.check_trial(run_id)
    with store.read() as conn:
        _trials.require_trial(conn, run_id)
        return {"metadata": _run_metadata.get(conn, run_id)}
