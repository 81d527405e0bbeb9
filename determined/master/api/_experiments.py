"""Experiment endpoints of this slice: create (YAML config + model definition), the
searcher's best validation, and the task context directory a trial downloads."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request, Response

from determined.common.expconf import ExperimentConfig
from determined.master import experiment, resources
from determined.master._errors import FailedPrecondition, InvalidArgument, NotFound
from determined.master.api import _experiment_filters, _templates, _unmanaged, _wire
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import ExperimentsDep, Limit, ReadsDep, StoreDep
from determined.master.api._model_definition import tar_model_definition
from determined.master.api._models import CreateExperiment
from determined.master.api._resolve import resolve
from determined.master.api._responses import ExperimentAnswer, ExperimentsAnswer, TrialsAnswer
from determined.master.api._services import services
from determined.master.api._wire import EMPTY_EXPERIMENT, experiment_json, trial_json
from determined.master.experiment import Experiments, State
from determined.master.store import Store, _experiments, _metrics, _projects, _trials

router = APIRouter(prefix="/api/v1")


def _launch_warnings(config: ExperimentConfig, rm: resources.ResourceManager | None) -> list[str]:
    """0.37's ``LaunchWarning``s: a trial larger than this cluster is queued, not refused (it
    starts once the master has the slots), with a warning that the CLI prints."""
    wanted = config.resources.slots_per_trial
    if rm is not None and wanted > rm.capacity():
        return ["LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED"]
    return []


@router.post("/experiments")
def create_experiment(
    body: CreateExperiment, caller: Caller, exps: ExperimentsDep, store: StoreDep, request: Request
) -> dict[str, Any]:
    caller.require_user()
    if body.unmanaged and not body.validate_only:
        return _unmanaged.create_unmanaged_experiment(body, caller, exps, store)
    found = services(request)
    refusal = found.sandbox.refusal(caller.info.username, caller.info.admin)
    if refusal is not None and found.rm is not None:
        # Its trials would run unsandboxed beside other users' (docs/security.md).
        raise FailedPrecondition(refusal)
    parent = template = None
    with store.read() as conn:
        if body.parent_id is not None:
            parent = _experiments.require_experiment(conn, body.parent_id)["config"]
        if body.template:  # the template's config: laid over nothing (400 if there is none)
            template = _templates.apply_template(conn, body.template, {})
    project: list[int] = []

    def workspace_of(config: dict[str, Any]) -> Mapping[str, Any]:
        with store.read() as conn:
            project.append(_projects.target_project(conn, body.project_id, config))
            ws_id = int(_projects.require_project(conn, project[0])["workspace_id"])
            return _projects.require_workspace(conn, ws_id)

    resolved = resolve(body.config, parent, template, workspace_of, found.container_defaults)
    if resolved.restored:
        caller.check_owner(store, int(body.parent_id or 0), "reuse the secrets of")
    config = resolved.config
    resources.check_bind_mounts(config, found.sandbox.active)
    warnings = _launch_warnings(config, found.rm)
    if body.validate_only:
        return {"experiment": dict(EMPTY_EXPERIMENT), "config": None, "warnings": warnings}
    tgz = tar_model_definition(body.model_definition or [])
    exp_id = exps.create(
        config,
        resolved.original,
        owner_id=caller.info.user_id,
        model_definition=tgz,
        activate=body.activate,
        project_id=project[0],
    )
    with store.read() as conn:
        created = experiment_json(conn, _experiments.require_experiment(conn, exp_id))
    return {"experiment": created, "config": created["config"], "warnings": warnings}


@router.get("/experiments/{experiment_id}/searcher/best_searcher_validation_metric")
def best_searcher_validation_metric(
    experiment_id: int, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    caller.check_experiment(experiment_id)
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        metric, smaller = experiment.searcher_metric(exp["config"])
        best = _metrics.best_experiment_validation(conn, experiment_id, metric, smaller)
    if best is None:
        raise NotFound(f"experiment {experiment_id} has no validation with {metric!r} yet")
    return {"metric": best}


@router.get("/tasks/{task_id}/context_directory")
def context_directory(task_id: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``{b64Tgz}``: the experiment's model definition, unpacked into a trial's work dir."""
    caller.check_task(task_id)
    with store.read() as conn:
        trial = _trials.trial_by_task(conn, task_id)
        if trial is None:
            raise NotFound(f"task {task_id} not found")
        exp = _experiments.require_experiment(conn, trial["experiment_id"])
    tgz = exp["model_definition"] or b""
    return {"b64Tgz": base64.b64encode(tgz).decode()}


@router.get("/experiments/{experiment_id}", response_model=ExperimentAnswer)
async def get_experiment(experiment_id: int, caller: Caller, reads: ReadsDep) -> Response:
    caller.check_experiment(experiment_id)
    # Only the experiment's own trials read its secrets (check_experiment above).
    return await reads.answer(describe_experiment, experiment_id, not caller.is_allocation)


def describe_experiment(conn: sa.Connection, experiment_id: int, redacted: bool) -> dict[str, Any]:
    """``GET /experiments/{id}``'s body (a read function: see _read_workers)."""
    exp = _experiments.require_shown(conn, experiment_id)
    body = experiment_json(conn, exp, redacted=redacted)
    return {"experiment": body, "config": body["config"], "jobSummary": None}


@router.get("/experiments", response_model=ExperimentsAnswer)
async def list_experiments(
    caller: Caller,
    reads: ReadsDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    archived: bool | None = None,
    users: list[str] = Query(default=[]),
    user_ids: list[int] = Query(default=[], alias="userIds"),
    project_id: int = Query(0, alias="projectId", ge=0),
    name: str = "",
    description: str = "",
    labels: list[str] = Query(default=[]),
    states: list[str] = Query(default=[]),
    sort_by: str = Query("SORT_BY_UNSPECIFIED", alias="sortBy"),
    order_by: str = Query("ORDER_BY_UNSPECIFIED", alias="orderBy"),
    id_lt: int | None = Query(None, alias="experimentIdFilter.lt"),
    id_lte: int | None = Query(None, alias="experimentIdFilter.lte"),
    id_gt: int | None = Query(None, alias="experimentIdFilter.gt"),
    id_gte: int | None = Query(None, alias="experimentIdFilter.gte"),
    id_incl: list[int] = Query(default=[], alias="experimentIdFilter.incl"),
    id_not_in: list[int] = Query(default=[], alias="experimentIdFilter.notIn"),
) -> Response:
    """``{experiments: [v1Experiment], pagination}``, filtered and sorted as 0.37's master
    does (api/_experiment_filters.py): ``archived`` (false over every project also hides
    archived projects' and workspaces' experiments), ``users``/``userIds``, ``projectId`` (0:
    every project), ``name``/``description`` (substrings), ``labels`` (all of them),
    ``states``, ``experimentIdFilter.*``, ``sortBy``/``orderBy`` (default: by id);
    ``offset``/``limit`` page (limit 0: all)."""
    caller.require_user()
    wanted = _experiment_filters.ExperimentFilter(
        name=name,
        description=description,
        labels=[label for label in labels if label],
        states=states,
        users=users,
        user_ids=user_ids,
        archived=archived,
        hide_archived_parents=archived is False and not project_id,
        ids=_experiment_filters.IdFilter(id_lt, id_lte, id_gt, id_gte, id_incl, id_not_in),
    )
    return await reads.answer(experiment_page, wanted, project_id, sort_by, order_by, offset, limit)


def experiment_page(
    conn: sa.Connection,
    wanted: _experiment_filters.ExperimentFilter,
    project_id: int,
    sort_by: str,
    order_by: str,
    offset: int,
    limit: int,
) -> dict[str, Any]:
    """``GET /experiments``' body (a read function: see _read_workers)."""
    if project_id:
        _projects.require_project(conn, project_id)
    if _in_sql(wanted, sort_by, order_by):
        # Filtered, counted and paged by the database: only the page's experiments are read.
        page_ids, total = _experiments.experiment_id_page(
            conn,
            project_id=project_id,
            archived=wanted.archived,
            owner_ids=wanted.user_ids,
            usernames=wanted.users,
            hide_archived_parents=wanted.hide_archived_parents,
            ids=dataclasses.asdict(wanted.ids),
            desc=order_by == "ORDER_BY_DESC",
            offset=offset,
            limit=limit,
        )
        by_id = _experiments.experiments_by_id(conn, page_ids)
        chunk = _wire.experiment_jsons(conn, [by_id[i] for i in page_ids if i in by_id])
        return {"experiments": chunk, "pagination": _wire.pagination(total, offset, limit)}
    if project_id:
        ids = _projects.project_experiment_ids(conn, project_id)
    else:
        ids = _experiments.list_experiment_ids(conn)
    by_id = _experiments.experiments_by_id(conn, ids)
    rows = [by_id[i] for i in ids if i in by_id]
    # Filters and most sorts need only each experiment's head: build the whole of it
    # (checkpoints, best trial) for the page alone.
    if _experiment_filters.SORT_KEYS.get(sort_by) in _wire.HEAD_FIELDS:
        facts = _wire.ExperimentFacts(conn, rows, whole=False)
        found = [e for e in (_wire.experiment_head(facts, r) for r in rows) if wanted.keeps(e)]
        found = _experiment_filters.sort_experiments(found, sort_by, order_by)
        chunk, pagination = _wire.page(found, offset, limit)
        chunk = _wire.experiment_jsons(conn, [by_id[e["id"]] for e in chunk])
    else:
        found = [e for e in _wire.experiment_jsons(conn, rows) if wanted.keeps(e)]
        found = _experiment_filters.sort_experiments(found, sort_by, order_by)
        chunk, pagination = _wire.page(found, offset, limit)
    return {"experiments": chunk, "pagination": pagination}


def _in_sql(wanted: _experiment_filters.ExperimentFilter, sort_by: str, order_by: str) -> bool:
    """Whether ``experiment_id_page`` can answer the listing: filters on the experiments'
    own columns, ordered by id (the default; the web UI's and ``det e list``'s listings).
    Names, labels, shown states and other orders are matched over each ``v1Experiment``."""
    return (
        not (wanted.name or wanted.description or wanted.labels or wanted.states)
        and _experiment_filters.SORT_KEYS.get(sort_by) == "id"
        and order_by in ("", *_experiment_filters.ORDERS)
    )


def _latest_metric(trial: dict[str, Any], metric: str) -> Any:
    latest = trial.get("latestValidation") or {}
    return ((latest.get("metrics") or {}).get("avgMetrics") or {}).get(metric)


_TRIAL_KEYS: dict[str, Any] = {
    "SORT_BY_ID": lambda t, m: t["id"],
    "SORT_BY_START_TIME": lambda t, m: t["startTime"],
    "SORT_BY_END_TIME": lambda t, m: t["endTime"],
    "SORT_BY_STATE": lambda t, m: t["state"],
    "SORT_BY_BEST_VALIDATION_METRIC": lambda t, m: t["searcherMetricValue"],
    "SORT_BY_LATEST_VALIDATION_METRIC": _latest_metric,
    "SORT_BY_BATCHES_PROCESSED": lambda t, m: t["totalBatchesProcessed"],
    "SORT_BY_RESTARTS": lambda t, m: t["restarts"],
    "SORT_BY_CHECKPOINT_SIZE": lambda t, m: int(t["totalCheckpointSize"]),
}


@router.get("/experiments/{experiment_id}/trials")
def get_experiment_trials(
    experiment_id: int,
    caller: Caller,
    store: StoreDep,
    offset: int = Query(0, ge=0),
    limit: Limit = 0,
    sort_by: str = Query("SORT_BY_UNSPECIFIED", alias="sortBy"),
    order_by: str = Query("ORDER_BY_UNSPECIFIED", alias="orderBy"),
    states: list[str] = Query(default=[]),
) -> TrialsAnswer:
    """``{trials: [v1Trial], pagination}`` by id unless ``sortBy`` says otherwise (ascending
    unless ``ORDER_BY_DESC``; trials without the value last); ``states`` filters on the
    shown state; ``limit`` 0 is all."""
    caller.check_experiment(experiment_id)
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        rows = [trial_json(conn, t) for t in _trials.trials_of(conn, experiment_id)]
    if states:
        rows = [t for t in rows if t["state"] in states]
    if sort_by not in ("", "SORT_BY_UNSPECIFIED"):
        if sort_by not in _TRIAL_KEYS:
            raise InvalidArgument(f"sortBy {sort_by!r} is not one of: {', '.join(_TRIAL_KEYS)}")
        metric, _ = experiment.searcher_metric(exp["config"])
        keyed = [(_TRIAL_KEYS[sort_by](t, metric), t) for t in rows]
        present = [(k, t) for k, t in keyed if k is not None]
        present.sort(key=lambda kt: kt[0], reverse=order_by in ("ORDER_BY_DESC", "desc"))
        rows = [t for _, t in present] + [t for k, t in keyed if k is None]
    elif order_by in ("ORDER_BY_DESC", "desc"):
        rows.reverse()
    chunk, pagination = _wire.page(rows, offset, limit)
    return {"trials": chunk, "pagination": pagination}


# What an action route has done to the experiment, by the experiments' runner.
Act = Callable[[Experiments, int], None]
Handler = Callable[[int, Principal, Experiments, Store], dict[str, Any]]


def experiment_action(router: APIRouter, action: str, act: Act, doc: str | None = None) -> Handler:
    """Serves ``POST /experiments/{experiment_id}/{action}``: for its owner (or an admin), has
    ``act`` done to the experiment and answers ``{}``. Returns the handler, which the bulk and
    run routes call for each experiment."""

    def handler(
        experiment_id: int, caller: Caller, exps: ExperimentsDep, store: StoreDep
    ) -> dict[str, Any]:
        caller.check_owner(store, experiment_id, action)
        act(exps, experiment_id)
        return {}

    handler.__name__ = handler.__qualname__ = action
    handler.__doc__ = doc
    return router.post(f"/experiments/{{experiment_id}}/{action}")(handler)


activate = experiment_action(router, "activate", lambda exps, i: exps.set_state(i, State.ACTIVE))
pause = experiment_action(router, "pause", lambda exps, i: exps.set_state(i, State.PAUSED))
cancel = experiment_action(
    router,
    "cancel",
    lambda exps, i: exps.stop(i, State.STOPPING_CANCELED),
    "Stop gracefully: running trials are preempted (checkpoint, then exit); ends CANCELED.",
)
kill = experiment_action(
    router,
    "kill",
    lambda exps, i: exps.stop(i, State.STOPPING_KILLED),
    "Stop now: trial processes are killed; trials and experiment end CANCELED.",
)
