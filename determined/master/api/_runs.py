"""Runs, 0.37's flat view of trials: ``POST /api/v1/runs`` (``SearchRuns``: filter, sort,
paging) and ``POST /api/v1/runs/{kill|archive|unarchive|move|delete|pause|resume}`` by
``runIds`` or by ``filter`` (then the ids must be empty), each answering one
``{error, id}`` per run as 0.37 does.

A run is a trial; its actions go through the trial and experiment handlers (no second state
machine): kill is the trial's kill; pause and resume pause or activate the run's experiment
(refused for runs of multi-trial searches, as 0.37 does); delete deletes the experiment of a
single-trial search (and its checkpoints) and is refused for one run of a multi-trial search
(delete the experiment); move takes a single-trial run's experiment along.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter
from pydantic import Field

from determined.master import experiment
from determined.master._errors import ApiError, InvalidArgument
from determined.master.api import _experiment_edits, _experiments
from determined.master.api import _projects as _projects_api
from determined.master.api._auth import Caller
from determined.master.api._deps import ExperimentsDep, ResourceManagerDep, StoreDep
from determined.master.api._models import _Body
from determined.master.api._run_filters import Filter, matches, parse_filter, parse_sort, sort_rows
from determined.master.api._wire import page, placement, trial_json
from determined.master.store import State, _projects, _run_metadata, _time, _trials
from determined.master.store import _experiments as _exp_rows
from determined.master.store._schema import trials as trials_table

router = APIRouter(prefix="/api/v1")


class SearchRunsRequest(_Body):
    project_id: int | None = None
    offset: int = 0
    limit: int = 0
    sort: str | None = None
    filter: str | None = None


class RunsActionRequest(_Body):
    """Every ``v1<Action>RunsRequest``: ``runIds`` or ``filter``, in a project."""

    run_ids: list[int] = Field(default_factory=list)
    project_id: int | None = None
    filter: str | None = None


class MoveRunsRequest(_Body):
    run_ids: list[int] = Field(default_factory=list)
    source_project_id: int = 0
    destination_project_id: int = 0
    filter: str | None = None
    skip_multitrial: bool = False


def _project_of(exp: Any) -> int:
    return int(exp.get("project_id") or 1)


def _run_row(conn: sa.Connection, trial: Any, exp: Any) -> dict[str, Any]:
    """``v1FlatRun`` plus the filter columns only this master's rows need (``hparams``)."""
    config = exp["config"] or {}
    t = trial_json(conn, trial)
    metric, _ = experiment.searcher_metric(config)
    searcher = config.get("searcher") or {}
    start, end = trial["start_time"], trial["end_time"]
    stop = _time.as_utc(end) if end is not None else _time.now()
    multitrial = searcher.get("name") != "single"
    archived = bool(trial.get("archived")) or bool(exp["archived"])
    project = _project_of(exp)
    return {
        "id": int(trial["id"]),
        "startTime": t["startTime"],
        "endTime": t["endTime"],
        # The stored state, as 0.37's runs API shows it: a live run is ACTIVE (its trial API
        # tells QUEUED from RUNNING; the runs API does not).
        "state": str(trial["state"]),
        "labels": list(config.get("labels") or []),
        "checkpointSize": t["totalCheckpointSize"],
        "checkpointCount": t["checkpointCount"],
        "searcherMetricValue": t["searcherMetricValue"],
        "externalRunId": None,
        "hyperparameters": trial["hparams"],
        "summaryMetrics": trial["summary_metrics"],
        "userId": exp["owner_id"],
        "duration": int((stop - _time.as_utc(start)).total_seconds()),
        **{k: v for k, v in placement(conn, project).items() if k != "projectOwnerId"},
        "experiment": {
            "id": int(exp["id"]),
            "name": config.get("name") or "",
            "description": config.get("description") or "",
            "searcherType": searcher.get("name") or "",
            "searcherMetric": metric,
            "resourcePool": (config.get("resources") or {}).get("resource_pool") or "default",
            "progress": float(exp["progress"] or 0.0),
            "unmanaged": False,
            "isMultitrial": multitrial,
            "forkedFrom": exp["parent_id"],
            "externalExperimentId": None,
        },
        "archived": archived,
        "localId": f"{int(trial['id'])}",
        "metadata": _run_metadata.get(conn, int(trial["id"])),
        # Filter and sort columns (stripped from the answer).
        "_columns": {
            "experimentDescription": config.get("description") or "",
            "experimentName": config.get("name") or "",
            "tags": list(config.get("labels") or []),
            "searcherType": searcher.get("name") or "",
            "searcherMetric": metric,
            "experimentProgress": round(float(exp["progress"] or 0.0) * 100),
            "user": exp["owner_id"],
            "forkedFrom": exp["parent_id"],
            "resourcePool": (config.get("resources") or {}).get("resource_pool") or "default",
            "searcherMetricsVal": t["searcherMetricValue"],
            "externalExperimentId": None,
            "experimentId": int(exp["id"]),
            "isExpMultitrial": multitrial,
            "hparams": trial["hparams"],
            "exp_archived": bool(exp["archived"]),
            "terminal": State(trial["state"]).is_terminal,
        },
    }


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """The row as the filters see it: the FlatRun's fields and the extra columns."""
    return {**{k: v for k, v in row.items() if k != "_columns"}, **row["_columns"]}


def _all_runs(store: Any) -> list[dict[str, Any]]:
    rows = []
    with store.read() as conn:
        ids = [int(r[0]) for r in conn.execute(sa.select(trials_table.c.id))]
        exps: dict[int, Any] = {}
        for trial_id in sorted(ids):
            trial = _trials.get_trial(conn, trial_id)
            if trial is None:
                continue
            exp_id = int(trial["experiment_id"])
            if exp_id not in exps:
                exps[exp_id] = _exp_rows.require_experiment(conn, exp_id)
            rows.append(_flat(_run_row(conn, trial, exps[exp_id])))
    return rows


def _answer(row: dict[str, Any]) -> dict[str, Any]:
    keep = {
        "id", "startTime", "endTime", "state", "labels", "checkpointSize", "checkpointCount",
        "searcherMetricValue", "externalRunId", "hyperparameters", "summaryMetrics", "userId",
        "duration", "projectId", "projectName", "workspaceId", "workspaceName", "parentArchived",
        "experiment", "archived", "localId", "metadata",
    }  # fmt: skip
    return {k: v for k, v in row.items() if k in keep}


@router.post("/runs")
def search_runs(body: SearchRunsRequest, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``SearchRuns``: the runs that pass the filter (archived ones only with
    ``showArchived``), sorted, one page (``limit`` 0 or less: all)."""
    caller.require_user()
    flt = parse_filter(body.filter)
    sort = parse_sort(body.sort)
    if body.offset < 0:
        raise InvalidArgument(f"offset {body.offset}: use 0 or more")
    rows = [
        r
        for r in _all_runs(store)
        if (body.project_id is None or r["projectId"] == body.project_id) and matches(flt, r)
    ]
    chunk, pagination = page(sort_rows(rows, sort), body.offset, max(body.limit, 0))
    return {"runs": [_answer(r) for r in chunk], "pagination": pagination}


def _candidates(
    store: Any, run_ids: list[int], project_id: int | None, text: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(runs, results)``: the runs named by ids or picked by the filter, and a "not found"
    result for each id that names no run of the project."""
    if run_ids and text is not None:
        raise InvalidArgument("if filter is provided run id list must be empty")
    flt: Filter | None = parse_filter(text) if text is not None else None
    runs = [r for r in _all_runs(store) if not project_id or r["projectId"] == project_id]
    if text is not None:
        return [r for r in runs if matches(flt, r)], []
    by_id = {int(r["id"]): r for r in runs}
    picked = [by_id[i] for i in dict.fromkeys(run_ids) if i in by_id]
    where = f" in project with id '{project_id}'" if project_id else ""
    missing = [
        {"error": f"Run with id '{i}' not found{where}", "id": i}
        for i in dict.fromkeys(run_ids)
        if i not in by_id
    ]
    return picked, missing


def _do(run_id: int, act: Callable[[], Any]) -> dict[str, Any]:
    try:
        act()
    except ApiError as e:
        return {"error": str(e), "id": run_id}
    return {"error": "", "id": run_id}


@router.post("/runs/kill")
def kill_runs(
    body: RunsActionRequest, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    """``KillRuns``: each run's trial is killed (an ended one is left as it is)."""
    caller.require_user()
    runs, results = _candidates(store, body.run_ids, body.project_id, body.filter)
    for run in runs:
        run_id = int(run["id"])

        def act(run_id: int = run_id) -> None:
            caller.check_trial_owner(store, run_id, "kill")
            exps.kill_trial(run_id)

        result = _do(run_id, act)
        if result["error"]:
            result["error"] = f"Failed to kill run: {result['error']}"
        results.append(result)
    return {"results": results}


def _archive(body: RunsActionRequest, caller: Any, store: Any, archive: bool) -> dict[str, Any]:
    caller.require_user()
    runs, results = _candidates(store, body.run_ids, body.project_id, body.filter)
    accepted = []
    for run in runs:
        run_id, cols = int(run["id"]), run
        if cols["exp_archived"]:
            results.append(
                {
                    "error": f"Run is part of archived Search (id: '{cols['experimentId']}').",
                    "id": run_id,
                }
            )
        elif bool(run["archived"]) == archive:
            results.append({"error": "", "id": run_id})
        elif not cols["terminal"]:
            results.append({"error": "Run is not in terminal state.", "id": run_id})
        else:
            outcome = _do(
                run_id, functools.partial(caller.check_trial_owner, store, run_id, "archive")
            )
            if outcome["error"]:
                results.append(outcome)
            else:
                accepted.append(run_id)
    if accepted:
        with store.tx() as conn:
            conn.execute(
                trials_table.update()
                .where(trials_table.c.id.in_(accepted))
                .values(archived=archive)
            )
        results.extend({"error": "", "id": i} for i in accepted)
    return {"results": results}


@router.post("/runs/archive")
def archive_runs(body: RunsActionRequest, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``ArchiveRuns``: ended runs are hidden from searches without ``showArchived``."""
    return _archive(body, caller, store, True)


@router.post("/runs/unarchive")
def unarchive_runs(body: RunsActionRequest, caller: Caller, store: StoreDep) -> dict[str, Any]:
    return _archive(body, caller, store, False)


def _pause_resume(
    body: RunsActionRequest, caller: Any, exps: Any, store: Any, pause: bool
) -> dict[str, Any]:
    caller.require_user()
    runs, results = _candidates(store, body.run_ids, body.project_id, body.filter)
    for run in runs:
        run_id = int(run["id"])
        if run["archived"]:
            results.append({"error": "Run is archived.", "id": run_id})
            continue
        if run["isExpMultitrial"]:
            results.append(
                {
                    "error": f"Cannot pause/unpause run '{run_id}' (part of multi-trial).",
                    "id": run_id,
                }
            )
            continue
        exp_id = int(run["experimentId"])
        handler = _experiments.pause if pause else _experiments.activate
        result = _do(run_id, functools.partial(handler, exp_id, caller, exps, store))
        if result["error"]:
            what = "pause" if pause else "resume"
            result["error"] = f"Failed to {what} associated experiment: {result['error']}"
        results.append(result)
    return {"results": results}


@router.post("/runs/pause")
def pause_runs(
    body: RunsActionRequest, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    """``PauseRuns``: pauses the experiment of each single-trial run."""
    return _pause_resume(body, caller, exps, store, True)


@router.post("/runs/resume")
def resume_runs(
    body: RunsActionRequest, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    """``ResumeRuns``: activates the experiment of each single-trial run."""
    return _pause_resume(body, caller, exps, store, False)


@router.post("/runs/delete")
def delete_runs(
    body: RunsActionRequest,
    caller: Caller,
    exps: ExperimentsDep,
    store: StoreDep,
    rm: ResourceManagerDep,
) -> dict[str, Any]:
    """``DeleteRuns``: an ended run of a single-trial search goes with its experiment (its
    checkpoints too); a run of a multi-trial search is refused (delete its experiment)."""
    caller.require_user()
    runs, results = _candidates(store, body.run_ids, body.project_id, body.filter)
    for run in runs:
        run_id = int(run["id"])
        if not run["terminal"]:
            results.append({"error": "Run is not in a terminal state.", "id": run_id})
            continue
        if run["isExpMultitrial"]:
            results.append(
                {
                    "error": f"Cannot delete run '{run_id}' alone (part of multi-trial "
                    f"experiment {run['experimentId']}); delete the experiment instead.",
                    "id": run_id,
                }
            )
            continue
        exp_id = int(run["experimentId"])
        delete = functools.partial(
            _experiment_edits.delete_experiment, exp_id, caller, exps, store, rm
        )
        results.append(_do(run_id, delete))
    return {"results": results}


@router.post("/runs/move")
def move_runs(body: MoveRunsRequest, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``MoveRuns``: a run of a single-trial experiment moves with its experiment; a run of a
    multi-trial experiment cannot leave it (skipped with ``skipMultitrial``, else an error
    result saying to move the experiment)."""
    caller.require_user()
    with store.read() as conn:
        _projects.open_project(conn, body.destination_project_id)
    runs, results = _candidates(store, body.run_ids, body.source_project_id, body.filter)
    for run in runs:
        run_id, exp = int(run["id"]), run["experiment"]
        if exp["isMultitrial"]:
            if not body.skip_multitrial:
                results.append(
                    {
                        "error": f"run {run_id} is part of multi-trial experiment {exp['id']}: "
                        "move the experiment (det e move) instead",
                        "id": run_id,
                    }
                )
            continue
        move = functools.partial(
            _projects_api.move, int(exp["id"]), body.destination_project_id, caller, store
        )
        results.append(_do(run_id, move))
    return {"results": results}
