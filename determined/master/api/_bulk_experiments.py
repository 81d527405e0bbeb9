"""Many experiments at once, as 0.37's project routes do it:
``POST /api/v1/projects/{id}/experiments/{activate|pause|cancel|kill|archive|unarchive}`` and
``DELETE /api/v1/projects/{id}/experiments/delete``, by ``experimentIds`` or by ``filters``
(which then replace the ids). Each experiment goes through the same handler as its own route
(so the same checks and errors apply); the answer lists one result per experiment, with the
error message of those that failed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from pydantic import Field

from determined.master._errors import ApiError
from determined.master.api import _experiment_edits, _experiments
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import ExperimentsDep, ResourceManagerDep, StoreDep
from determined.master.api._models import _Body
from determined.master.experiment import Experiments, State
from determined.master.resources import ResourceManager
from determined.master.store import ExperimentRow, Store
from determined.master.store import _experiments as _exp_rows

router = APIRouter(prefix="/api/v1")

_TERMINAL = [s.value for s in State if s.is_terminal]
_NOT_ENDED = [s.value for s in State if not s.is_terminal]


class BulkFilters(_Body):
    """``v1BulkExperimentFilters``."""

    description: str = ""
    name: str = ""
    labels: list[str] = Field(default_factory=list)
    archived: bool | None = None
    states: list[str] = Field(default_factory=list)
    user_ids: list[int] = Field(default_factory=list)
    project_id: int = 0
    excluded_experiment_ids: list[int] = Field(default_factory=list)


class BulkRequest(_Body):
    experiment_ids: list[int] = Field(default_factory=list)
    filters: BulkFilters | None = None
    project_id: int = 0


def _project_of(exp: ExperimentRow) -> int:
    return int(exp["project_id"] or 1)


def _matches(exp: ExperimentRow, f: BulkFilters, states: list[str]) -> bool:
    config = exp["config"]
    return (
        exp["id"] not in f.excluded_experiment_ids
        and f.description.lower() in str(config.get("description") or "").lower()
        and f.name.lower() in str(config.get("name") or "").lower()
        and set(f.labels) <= set(config.get("labels") or [])
        and (f.archived is None or bool(exp["archived"]) == f.archived)
        and (not states or exp["state"] in states)
        and (not f.user_ids or exp["owner_id"] in f.user_ids)
        and (f.project_id == 0 or _project_of(exp) == f.project_id)
    )


# 0.37's projectId for a bulk action over every project (its e2e helpers send it).
GLOBAL_PROJECT_ID = -1


def selected_ids(store: Store, project_id: int, body: BulkRequest, states: list[str]) -> list[int]:
    """The ids to act on: the filters' matches (``states`` when the filters name none, as 0.37
    defaults them per action), else the ids given."""
    if body.filters is None:
        return list(dict.fromkeys(body.experiment_ids))
    f = body.filters
    wanted = [s if s.startswith("STATE_") else "STATE_" + s for s in f.states] or states
    with store.read() as conn:
        rows = [_exp_rows.get_experiment(conn, i) for i in _exp_rows.list_experiment_ids(conn)]
    return [
        int(e["id"])
        for e in rows
        if e is not None
        and (project_id in (0, GLOBAL_PROJECT_ID) or _project_of(e) == project_id)
        and _matches(e, f, wanted)
    ]


def _run(ids: list[int], act: Callable[[int], Any]) -> dict[str, Any]:
    results = []
    for experiment_id in ids:
        try:
            act(experiment_id)
            results.append({"error": "", "id": experiment_id})
        except ApiError as e:
            results.append({"error": str(e), "id": experiment_id})
    return {"results": results}


Act = Callable[[int, Principal, Experiments, Store, ResourceManager | None], Any]


def _bulk(name: str, states: list[str], act: Act) -> None:
    def handler(
        project_id: int,
        body: BulkRequest,
        caller: Caller,
        exps: ExperimentsDep,
        store: StoreDep,
        rm: ResourceManagerDep,
    ) -> dict[str, Any]:
        caller.require_user()
        ids = selected_ids(store, project_id, body, states)
        return _run(ids, lambda i: act(i, caller, exps, store, rm))

    handler.__name__ = f"bulk_{name}"
    method = router.delete if name == "delete" else router.post
    method(f"/projects/{{project_id}}/experiments/{name}")(handler)


_bulk("activate", [State.PAUSED.value], lambda i, c, e, s, r: _experiments.activate(i, c, e, s))
_bulk("pause", [State.ACTIVE.value], lambda i, c, e, s, r: _experiments.pause(i, c, e, s))
_bulk("cancel", _NOT_ENDED, lambda i, c, e, s, r: _experiments.cancel(i, c, e, s))
_bulk("kill", _NOT_ENDED, lambda i, c, e, s, r: _experiments.kill(i, c, e, s))
_bulk("archive", _TERMINAL, lambda i, c, e, s, r: _experiment_edits.archive(i, c, e, s))
_bulk("unarchive", _TERMINAL, lambda i, c, e, s, r: _experiment_edits.unarchive(i, c, e, s))
_bulk("delete", _TERMINAL, lambda i, c, e, s, r: _experiment_edits.delete_experiment(i, c, e, s, r))
