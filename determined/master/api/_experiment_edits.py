"""What a user changes on an experiment after creating it: archive, unarchive, patch (name,
description, labels, notes, resources, GC policy), delete; and its model definition."""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter

from determined.master import resources
from determined.master._errors import (
    FailedPrecondition,
    InvalidArgument,
)
from determined.master.api._auth import Caller
from determined.master.api._deps import ExperimentsDep, ResourceManagerDep, StoreDep
from determined.master.api._experiments import experiment_action
from determined.master.api._models import PatchExperiment
from determined.master.api._wire import experiment_json
from determined.master.experiment import Experiments, State
from determined.master.resources import ResourceManager
from determined.master.store import Store, _checkpoints, _experiments, _models, _trials

router = APIRouter(prefix="/api/v1")

# v1PatchExperiment's resources fields, in the config's own names.
_RESOURCES = {"maxSlots": "max_slots", "weight": "weight", "priority": "priority"}
_GC_POLICY = {
    "saveExperimentBest": "save_experiment_best",
    "saveTrialBest": "save_trial_best",
    "saveTrialLatest": "save_trial_latest",
}


archive = experiment_action(
    router,
    "archive",
    lambda exps, i: exps.set_archived(i, True),
    "Hide an ended experiment from default listings (400 unless terminal and unarchived).",
)
unarchive = experiment_action(router, "unarchive", lambda exps, i: exps.set_archived(i, False))


def _renamed(fields: dict[str, Any] | None, names: dict[str, str]) -> dict[str, Any]:
    out = {}
    for key, value in (fields or {}).items():
        name = names.get(key, key if key in names.values() else None)
        if name is None:
            raise InvalidArgument(f"unknown field {key!r}; known: {', '.join(sorted(names))}")
        if value is not None or name == "max_slots":  # null clears max_slots (no limit)
            out[name] = value
    return out


@router.patch("/experiments/{experiment_id}")
def patch_experiment(
    experiment_id: int,
    body: PatchExperiment,
    caller: Caller,
    exps: ExperimentsDep,
    store: StoreDep,
) -> dict[str, Any]:
    """Change the fields present in the body; answers ``{experiment}`` as it is now."""
    caller.check_owner(store, experiment_id, "edit")
    if body.id is not None and body.id != experiment_id:
        raise InvalidArgument(f"body id {body.id} does not match experiment {experiment_id}")
    values = body.model_dump(exclude={"id"})
    values["resources"] = _renamed(body.resources, _RESOURCES)
    values["checkpoint_storage"] = _renamed(body.checkpoint_storage, _GC_POLICY)
    exps.patch(experiment_id, values)
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        out = experiment_json(conn, exp)
    if values["checkpoint_storage"] and State(exp["state"]).is_terminal:
        resources.collect_async(store, experiment_id)  # the new policy applies at once
    return {"experiment": out}


def _labels(exps: ExperimentsDep, store: StoreDep, experiment_id: int, add: str, drop: str) -> Any:
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
    labels = [x for x in exp["config"].get("labels") or [] if x != drop]
    if add and add not in labels:
        labels.append(add)
    exps.patch(experiment_id, {"labels": labels})
    return {"labels": labels}


@router.put("/experiments/{experiment_id}/labels/{label}")
def put_label(
    experiment_id: int, label: str, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    """Add one label (the SDK's ``add_label``); ``{labels}`` as they are now."""
    caller.check_owner(store, experiment_id, "edit")
    return _labels(exps, store, experiment_id, label, "")


@router.delete("/experiments/{experiment_id}/labels/{label}")
def delete_label(
    experiment_id: int, label: str, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    caller.check_owner(store, experiment_id, "edit")
    return _labels(exps, store, experiment_id, "", label)


@router.delete("/experiments/{experiment_id}")
def delete_experiment(
    experiment_id: int,
    caller: Caller,
    exps: ExperimentsDep,
    store: StoreDep,
    rm: ResourceManagerDep = None,
) -> dict[str, Any]:
    """Delete an ended experiment: its checkpoints' files and TensorBoard files, then every
    record of it. Done when the answer comes (the reference answers first and deletes in the
    background)."""
    caller.check_owner(store, experiment_id, "delete")
    delete_experiments(store, exps, rm, [experiment_id])
    return {}


def delete_experiments(
    store: Store, exps: Experiments, rm: ResourceManager | None, experiment_ids: list[int]
) -> None:
    """Delete ended experiments (``DELETE /experiments/{id}``, and a deleted project's or
    workspace's): all are checked first (ended, no checkpoint registered as a model version),
    then each loses its checkpoint and TensorBoard files and its records in turn.

    Raises:
        NotFound, FailedPrecondition: one not ended, a registered checkpoint, storage that
            refused a delete (the experiments before it are deleted by then).
    """
    uuids: dict[int, list[str]] = {}
    configs: dict[int, dict[str, Any]] = {}
    with store.read() as conn:
        for experiment_id in experiment_ids:
            configs[experiment_id] = exps.check_deletable(conn, experiment_id)["config"]
            uuids[experiment_id] = [
                c["uuid"]
                for t in _trials.trials_of(conn, experiment_id)
                for c in _checkpoints.of_trial(conn, int(t["id"]))
            ]
        registered = sorted(
            _models.registered_uuids(conn, [u for us in uuids.values() for u in us])
        )
    if registered:
        which = ", ".join(map(str, experiment_ids))
        raise FailedPrecondition(
            f"experiment {which} was not deleted: its checkpoint(s) "
            f"{', '.join(registered)} are registered as model versions; delete those versions "
            "first (det model ...) or keep the experiment"
        )
    for experiment_id in experiment_ids:
        failed = resources.delete_checkpoints(store, uuids[experiment_id])
        if failed:
            uuid, why = next(iter(failed.items()))
            raise FailedPrecondition(
                f"experiment {experiment_id} was not deleted: {len(failed)} checkpoint(s) could "
                f"not be deleted from storage (first: {uuid}: {why}); fix the storage and try "
                "again"
            )
        _tensorboard_files(store, experiment_id, configs[experiment_id])
        exps.delete(experiment_id)
        if rm is not None:
            rm.drop_environment(experiment_id)


def _tensorboard_files(store: Store, experiment_id: int, config: dict[str, Any]) -> None:
    try:
        resources.delete_tensorboard_files(store, experiment_id, config)
    except OSError as e:
        raise FailedPrecondition(
            f"the TensorBoard files of experiment {experiment_id} could not be deleted: {e}"
        ) from e


@router.delete("/experiments/{experiment_id}/tensorboard-files")
def delete_tensorboard_files(experiment_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """Delete the TensorBoard files the experiment's trials synced to its checkpoint storage
    (``det e delete-tb-files``); shared_fs and directory storage only, for now."""
    caller.check_owner(store, experiment_id, "delete the TensorBoard files of")
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
    _tensorboard_files(store, experiment_id, exp["config"])
    return {}


@router.get("/experiments/{experiment_id}/model_def")
def model_def(experiment_id: int, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``{b64Tgz}``: the model definition the experiment was created with, as a tar.gz."""
    caller.check_experiment(experiment_id)
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
    return {"b64Tgz": base64.b64encode(exp["model_definition"] or b"").decode()}
