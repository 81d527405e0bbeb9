"""The web UI: its pages and static files, and the read-only data it needs beyond the v1 API.

Pages (``/``, ``/login``, ``/cluster``, ``/tasks``, ``/experiments/{id}``, ``/trials/{id}``,
``/models``, ``/models/{name}``) are static HTML shells from ``determined/master/webui/static``;
their JavaScript calls the master's REST API with the token it got from ``POST
/api/v1/auth/login``. The ``/api/v1/webui/...`` endpoints below are private to the UI (their
shapes may change).
"""

from __future__ import annotations

import pathlib
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse

from determined.master import experiment, searcher
from determined.master._errors import NotFound
from determined.master.api import _agents, _checkpoint_files, _redact
from determined.master.api._auth import Caller, authenticate_connection
from determined.master.api._deps import StoreDep
from determined.master.store import _experiments, _metrics, _time, _trials

router = APIRouter()
STATIC = pathlib.Path(__file__).parent.parent / "webui" / "static"
_PAGES = {
    "list": "index.html",
    "experiment": "experiment.html",
    "trial": "trial.html",
    "models": "models.html",
}


def _page(name: str) -> HTMLResponse:
    return HTMLResponse((STATIC / name).read_text(encoding="utf-8"))


@router.get("/", include_in_schema=False)
def experiments_page() -> HTMLResponse:
    return _page(_PAGES["list"])


@router.get("/cluster", include_in_schema=False)
def cluster_page() -> HTMLResponse:
    """Agents and slots (enable, disable, drain) and the job queue."""
    return _page("cluster.html")


@router.get("/login", include_in_schema=False)
def login_page() -> HTMLResponse:
    return _page("login.html")


# Any id, numeric or not, gets the page: the page itself says when there is no such experiment
# or trial (one message, in the UI's frame) rather than a bare JSON 404 or 422.
@router.get("/tasks", include_in_schema=False, response_model=None)
async def tasks_page(request: Request, store: StoreDep) -> HTMLResponse | dict[str, Any]:
    """The Tasks page for a browser; for an API client (no ``text/html`` in ``Accept``), 0.37's
    legacy ``GET /tasks`` JSON (``_agents.legacy_tasks``), which shares the path."""
    if "text/html" in request.headers.get("accept", ""):
        return _page("tasks.html")
    caller = await authenticate_connection(request)
    return await run_in_threadpool(_agents.legacy_tasks, request, caller, store)


@router.get("/experiments/{experiment_id}", include_in_schema=False)
def experiment_page(experiment_id: str) -> HTMLResponse:
    return _page(_PAGES["experiment"])


@router.get("/trials/{trial_id}", include_in_schema=False)
def trial_page(trial_id: str) -> HTMLResponse:
    return _page(_PAGES["trial"])


@router.get("/models", include_in_schema=False)
def models_page() -> HTMLResponse:
    return _page(_PAGES["models"])


@router.get("/models/{model_name}", include_in_schema=False)
def model_page(model_name: str) -> HTMLResponse:
    return _page(_PAGES["models"])


@router.get("/webui/static/{path:path}", include_in_schema=False)
def static_file(path: str) -> FileResponse:
    """A file under the package's static dir (no path may leave it)."""
    root = STATIC.resolve()
    target = (root / path).resolve()
    if root not in target.parents or not target.is_file():
        raise NotFound(f"no static file {path!r}")
    return FileResponse(target)


def _row_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "group": row["metric_group"],
        "stepsCompleted": int(row["steps_completed"]),
        "reportTime": _time.rfc3339(row["report_time"]),
        "metrics": row["metrics"],
    }


@router.get("/api/v1/webui/trials/{trial_id}/metrics")
def trial_metrics(
    trial_id: int, caller: Caller, store: StoreDep, group: str | None = None
) -> dict[str, Any]:
    """``{metrics: [{group, stepsCompleted, reportTime, metrics}]}``: the trial's live
    reports in step order, of ``group`` (training, validation, ...) or all."""
    caller.require_user()
    with store.read() as conn:
        _trials.require_trial(conn, trial_id)
        rows = _metrics.list_rows(conn, trial_id, group)
    return {"metrics": [_row_json(r) for r in rows]}


@router.get("/api/v1/webui/experiments/{experiment_id}/metrics")
def experiment_metrics(
    experiment_id: int,
    caller: Caller,
    store: StoreDep,
    group: str = Query("validation"),
    metric: str | None = None,
) -> dict[str, Any]:
    """Every trial's ``group`` reports, ``metric`` only (default: the searcher metric), as
    ``{metric, smallerIsBetter, trials: [{trialId, state, hparams, points: [[steps, value]]}]}``
    (the learning curves)."""
    caller.require_user()
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        searcher_metric, smaller = experiment.searcher_metric(exp["config"])
        name = metric or searcher_metric
        out = []
        for trial in _trials.trials_of(conn, experiment_id):
            rows = _metrics.list_rows(conn, int(trial["id"]), group)
            points = [
                [int(r["steps_completed"]), r["metrics"][name]]
                for r in rows
                if isinstance(r["metrics"].get(name), (int, float))
            ]
            out.append(
                {
                    "trialId": trial["id"],
                    "state": trial["state"],
                    "hparams": trial["hparams"],
                    "points": points,
                }
            )
    return {"metric": name, "smallerIsBetter": smaller, "trials": out}


@router.get("/api/v1/webui/experiments/{experiment_id}/original_config")
def original_config(experiment_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``{originalConfig}``: the YAML as the user submitted it (before defaults)."""
    caller.require_user()
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
    return {"originalConfig": _redact.redact_text(exp["original_config"])}


def _rung_trials(
    conn: Any, exp_id: int, rung: dict[str, Any], length: int, metric: str
) -> list[dict[str, Any]]:
    rows = []
    for request_id, _signed, promoted in rung.get("metrics") or []:
        trial = _trials.trial_by_request(conn, exp_id, str(request_id))
        if trial is None:
            continue
        val = _metrics.at_steps(conn, int(trial["id"]), "validation", length)
        value = None if val is None else (val["metrics"] or {}).get(metric)
        rows.append({"trialId": trial["id"], "metric": value, "promoted": bool(promoted)})
    return rows


@router.get("/api/v1/webui/experiments/{experiment_id}/rungs")
def experiment_rungs(experiment_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """For ASHA searches, ``{brackets: [{rungs: [{length, outstanding, trials: [{trialId,
    metric, promoted}]}]}]}`` from the search's stored snapshot; other searches: no brackets."""
    caller.require_user()
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        config = exp["config"]
        snapshot = _experiments.load_snapshot(conn, experiment_id)
        metric, _ = experiment.searcher_metric(config)
        core = (snapshot or {}).get("core") or {}
        subs = core.get("subs") or ([core] if "rungs" in core else [])
        if not subs or snapshot is None:
            return {"searcher": (config.get("searcher") or {}).get("name"), "brackets": []}
        method = searcher.restore_search_method(
            config["searcher"], config.get("hyperparameters"), snapshot
        )
        brackets = []
        for lengths, sub in zip(method.rung_lengths, subs, strict=False):
            rungs = [
                {
                    "length": length,
                    "outstanding": int(rung.get("outstanding") or 0),
                    "trials": _rung_trials(conn, experiment_id, rung, length, metric),
                }
                for length, rung in zip(lengths, sub.get("rungs") or [], strict=False)
            ]
            brackets.append({"rungs": rungs})
    return {"searcher": config["searcher"].get("name"), "brackets": brackets}


@router.get("/api/v1/webui/checkpoints/{uuid}/download")
def download_checkpoint(
    uuid: str, caller: Caller, store: StoreDep, tasks: BackgroundTasks
) -> FileResponse:
    """The checkpoint's files as ``<uuid>.tar.gz``, under a ``<uuid>/`` directory."""
    caller.require_user()
    archive = _checkpoint_files.build_archive(store, uuid, "tgz", uuid)
    tasks.add_task(archive.unlink, missing_ok=True)
    return FileResponse(archive, filename=f"{uuid}.tar.gz", media_type="application/gzip")
