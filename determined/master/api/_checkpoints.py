"""Checkpoint records and storage backends: ``runs/start``, ``checkpoints`` POST/GET/PATCH."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from determined.common.api._session import json_safe
from determined.master import resources
from determined.master._errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.api._models import (
    DeleteCheckpoints,
    PatchCheckpoints,
    PostCheckpointMetadata,
    RemoveCheckpointFiles,
    ReportCheckpoint,
    StartRun,
)
from determined.master.api._responses import CheckpointAnswer
from determined.master.api._wire import checkpoint_json
from determined.master.store import (
    CheckpointRow,
    _checkpoints,
    _experiments,
    _models,
    _time,
    _trials,
)

router = APIRouter(prefix="/api/v1")


@router.post("/runs/start")
def start_run(body: StartRun, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """Register (or find) the run's checkpoint storage; every trial's ``core.init()`` calls it."""
    caller.check_reporter(store, body.run_id)
    with store.tx() as conn:
        if _trials.get_trial(conn, body.run_id) is None:
            raise NotFound(f"run {body.run_id} not found")
        if body.checkpoint_storage is None:
            return {"storageId": None}
        return {"storageId": _checkpoints.storage_id(conn, json_safe(body.checkpoint_storage))}


@router.post("/checkpoints")
def report_checkpoint(body: ReportCheckpoint, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """Record a COMPLETED checkpoint of a trial's task."""
    caller.check_task(body.task_id)
    if body.state not in (None, "", "STATE_COMPLETED"):
        raise InvalidArgument(
            f"checkpoint state {body.state!r} cannot be reported; only STATE_COMPLETED can"
        )
    try:
        when = _time.parse(body.report_time)
    except ValueError as e:
        raise InvalidArgument(f"reportTime {body.report_time!r} is not an RFC 3339 time") from e
    with store.read() as conn:
        trial = _trials.trial_by_task(conn, body.task_id)
    if trial is None:
        raise InvalidArgument(f"task {body.task_id} is not a trial's task")
    caller.check_reporter(store, int(trial["id"]))
    with store.tx() as conn:
        _checkpoints.insert(
            conn,
            uuid=body.uuid,
            trial_id=int(trial["id"]),
            task_id=body.task_id,
            allocation_id=body.allocation_id,
            report_time=when,
            resources=body.resources,
            metadata=json_safe(body.metadata),
            storage=body.storage_id,
        )
    return {}


def _readable(caller: Caller, conn: Any, ckpt: CheckpointRow) -> None:
    if caller.trial is None:
        return
    owner = _trials.require_trial(conn, ckpt["trial_id"])
    same_exp = owner["experiment_id"] == caller.trial["experiment_id"]
    if not same_exp and caller.trial["warm_start_checkpoint"] != ckpt["uuid"]:
        raise PermissionDenied(
            f"checkpoint {ckpt['uuid']} is neither this experiment's nor this trial's warm start"
        )


def _owns_checkpoint(caller: Caller, conn: Any, ckpt: CheckpointRow, action: str) -> None:
    """403 unless a user's token of the checkpoint's experiment's owner, or an admin's."""
    caller.require_user()
    if caller.info.admin:
        return
    experiment_id = int(_trials.require_trial(conn, ckpt["trial_id"])["experiment_id"])
    if _experiments.owner_of(conn, experiment_id) != caller.info.user_id:
        raise PermissionDenied(
            f"checkpoint {ckpt['uuid']} belongs to experiment {experiment_id} of another user: "
            f"only its owner or an admin may {action} it; nothing was changed"
        )


@router.get("/checkpoints/{uuid}")
def get_checkpoint(uuid: str, caller: Caller, store: StoreDep) -> CheckpointAnswer:
    with store.read() as conn:
        ckpt = _checkpoints.require(conn, uuid)
        _readable(caller, conn, ckpt)
        # A trial reads its own experiment's secrets (a warm start's config stays redacted).
        own = caller.trial is not None and int(caller.trial["experiment_id"]) == int(
            _trials.require_trial(conn, ckpt["trial_id"])["experiment_id"]
        )
        return {"checkpoint": checkpoint_json(conn, ckpt, redacted=not own)}


@router.post("/checkpoints/{uuid}/metadata")
def post_checkpoint_metadata(
    uuid: str, body: PostCheckpointMetadata, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """Replace the checkpoint's user metadata (0.37's ``PostCheckpointMetadata``; the SDK's
    ``Checkpoint.add_metadata``); ``{checkpoint}`` as it is now. Its owner or an admin only."""
    with store.tx() as conn:
        ckpt = _checkpoints.require(conn, uuid)
        _owns_checkpoint(caller, conn, ckpt, "change the metadata of")
        _checkpoints.set_metadata(conn, uuid, json_safe(body.checkpoint.metadata))
        return {"checkpoint": checkpoint_json(conn, _checkpoints.require(conn, uuid))}


@router.patch("/checkpoints")
def patch_checkpoints(body: PatchCheckpoints, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """After files were deleted: an empty resource map marks the checkpoint DELETED."""
    with store.tx() as conn:
        for item in body.checkpoints:
            ckpt = _checkpoints.require(conn, item.uuid)
            if caller.allocation is not None:
                caller.check_task(ckpt["task_id"])
            else:
                _owns_checkpoint(caller, conn, ckpt, "change")
            resources = None if item.resources is None else item.resources.resources
            _checkpoints.update_resources(conn, item.uuid, resources)
    return {}


def _require_own(caller: Caller, store: StoreDep, uuids: list[str], action: str) -> None:
    """404 naming every unknown uuid, 403 for another's: checked before anything changes."""
    with store.read() as conn:
        found = {u: _checkpoints.get(conn, u) for u in uuids}
        missing = [u for u, c in found.items() if c is None]
        if missing:
            raise NotFound(f"checkpoint(s) not found: {', '.join(missing)}; nothing was {action}d")
        for ckpt in found.values():
            assert ckpt is not None
            _owns_checkpoint(caller, conn, ckpt, action)


def _refuse_registered(store: StoreDep, uuids: list[str], what: str) -> None:
    """A checkpoint registered as a model version keeps its files (issue #13)."""
    with store.read() as conn:
        registered = sorted(_models.registered_uuids(conn, uuids))
    if registered:
        raise FailedPrecondition(
            f"checkpoint(s) {', '.join(registered)} are registered as model versions and cannot "
            f"be {what}; delete those model versions first. Nothing was {what}"
        )


def _storage_failures(failed: dict[str, str], what: str) -> None:
    if failed:
        lines = "; ".join(f"{u}: {why}" for u, why in failed.items())
        raise FailedPrecondition(
            f"{len(failed)} checkpoint(s) could not {what} in storage and keep their records: "
            f"{lines}"
        )


@router.delete("/checkpoints")
def delete_checkpoints(body: DeleteCheckpoints, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """Delete checkpoints' files from their storage and mark them DELETED (already deleted
    ones are left alone). Every uuid must exist, or nothing is deleted."""
    caller.require_user()
    _require_own(caller, store, body.checkpoint_uuids, "delete")
    _refuse_registered(store, body.checkpoint_uuids, "deleted")
    _storage_failures(resources.delete_checkpoints(store, body.checkpoint_uuids), "be deleted")
    return {}


@router.post("/checkpoints/rm")
def remove_checkpoint_files(
    body: RemoveCheckpointFiles, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """``det c rm UUIDS --glob G``: remove the files the globs name from each checkpoint
    (0.37 runs this as a GC task; here it is done when the call returns). Without globs the
    records are refreshed from what the storage holds."""
    caller.require_user()
    if not body.checkpoint_uuids:
        raise InvalidArgument("checkpointUuids is empty: name the checkpoints to change")
    _require_own(caller, store, body.checkpoint_uuids, "change")
    if body.checkpoint_globs:
        _refuse_registered(store, body.checkpoint_uuids, "changed")
    failed = resources.remove_checkpoint_files(store, body.checkpoint_uuids, body.checkpoint_globs)
    _storage_failures(failed, "have files removed")
    return {}
