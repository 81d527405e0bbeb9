"""Checkpoint GC at the end of an experiment (docs/reference/master.md §4.7).

:func:`select_deletions` is the policy (pure); :func:`collect` applies it: it deletes each
chosen checkpoint from its storage with ``determined.common.storage`` and marks it DELETED.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import threading
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from determined import tensorboard
from determined.common import storage
from determined.master.experiment import searcher_metric
from determined.master.store import (
    CheckpointRow,
    ExperimentRow,
    Store,
    _checkpoints,
    _experiments,
    _metrics,
    _models,
    _trials,
    _unmanaged,
)
from determined.master.store._schema import storage_backends

logger = logging.getLogger("determined.master")


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A COMPLETED checkpoint with the searcher metric of the validation at its steps (if any;
    ``order`` is that validation's id, the tie-break)."""

    uuid: str
    trial_id: int
    steps: int
    metric: float | None = None
    order: int = 0


def select_deletions(
    candidates: Iterable[Candidate],
    *,
    experiment_best: int,
    trial_best: int,
    trial_latest: int,
    smaller_is_better: bool = True,
) -> set[str]:
    """The uuids to delete: all but each trial's ``trial_latest`` newest, each trial's
    ``trial_best`` best and the experiment's ``experiment_best`` best (by searcher metric;
    checkpoints without a validated metric are never "best")."""
    cands = list(candidates)
    keep: set[str] = set()

    def best(of: list[Candidate], n: int) -> list[Candidate]:
        scored = [c for c in of if c.metric is not None and not math.isnan(c.metric)]
        sign = 1.0 if smaller_is_better else -1.0
        return sorted(scored, key=lambda c: (sign * float(c.metric or 0.0), c.order))[:n]

    by_trial: dict[int, list[Candidate]] = {}
    for c in cands:
        by_trial.setdefault(c.trial_id, []).append(c)
    for rows in by_trial.values():
        newest = sorted(rows, key=lambda c: c.steps, reverse=True)[: max(trial_latest, 0)]
        keep.update(c.uuid for c in newest)
        keep.update(c.uuid for c in best(rows, max(trial_best, 0)))
    keep.update(c.uuid for c in best(cands, max(experiment_best, 0)))
    return {c.uuid for c in cands} - keep


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _candidates(conn: sa.Connection, experiment_id: int, metric: str) -> list[Candidate]:
    trials = _trials.trials_of(conn, experiment_id)
    warm = _trials.warm_start_checkpoints(conn)  # of any experiment: they start from them
    # A model version's checkpoint is the registry's to keep, whatever the experiment's policy.
    registered = _models.registered_uuids(conn)
    out = []
    for trial in trials:
        for ckpt in _checkpoints.of_trial(conn, int(trial["id"])):
            if (
                ckpt["state"] != _checkpoints.COMPLETED
                or ckpt["uuid"] in warm
                or ckpt["uuid"] in registered
            ):
                continue
            steps = int(ckpt["steps_completed"])
            val = _metrics.at_steps(conn, int(trial["id"]), "validation", steps)
            value = None if val is None else _number((val["metrics"] or {}).get(metric))
            order = 0 if val is None else int(val["id"])
            out.append(Candidate(ckpt["uuid"], int(trial["id"]), steps, value, order))
    return out


def checkpoint_storage(conn: sa.Connection, ckpt: CheckpointRow) -> dict[str, Any]:
    """The storage config ``ckpt`` was written to: its recorded backend, else its experiment's
    ``checkpoint_storage``."""
    if ckpt["storage_id"] is not None:
        q = sa.select(storage_backends.c.config).where(storage_backends.c.id == ckpt["storage_id"])
        row = conn.execute(q).first()
        if row is not None and row[0]:
            return dict(row[0])
    trial = _trials.require_trial(conn, ckpt["trial_id"])
    exp = _experiments.require_experiment(conn, trial["experiment_id"])
    return dict(exp["config"].get("checkpoint_storage") or {})


def collect(store: Store, experiment_id: int) -> list[str]:
    """Apply the experiment's GC policy now; returns the uuids marked DELETED."""
    with store.read() as conn:
        exp = _experiments.get_experiment(conn, experiment_id)
        # An unmanaged experiment's checkpoints live where its user's script wrote them (a
        # laptop's directory, say); the script resumes from them: the master leaves them be.
        if exp is None or _unmanaged.is_unmanaged(conn, experiment_id):
            return []
        config = exp["config"]
        doomed = doomed_by(conn, exp, config.get("checkpoint_storage") or {})
    delete_checkpoints(store, sorted(doomed))
    with store.read() as conn:
        return [u for u in sorted(doomed) if _is_deleted(conn, u)]


def doomed_by(conn: sa.Connection, exp: ExperimentRow, policy: dict[str, Any]) -> set[str]:
    """The uuids of ``exp``'s checkpoints that ``policy`` (the ``save_*`` fields) deletes."""
    metric, smaller = searcher_metric(exp["config"])
    return select_deletions(
        _candidates(conn, int(exp["id"]), metric),
        experiment_best=int(policy.get("save_experiment_best", 0)),
        trial_best=int(policy.get("save_trial_best", 1)),
        trial_latest=int(policy.get("save_trial_latest", 1)),
        smaller_is_better=smaller,
    )


def _is_deleted(conn: sa.Connection, uuid: str) -> bool:
    ckpt = _checkpoints.get(conn, uuid)
    return ckpt is not None and ckpt["state"] == _checkpoints.DELETED


def delete_checkpoints(store: Store, uuids: Iterable[str]) -> dict[str, str]:
    """Delete each checkpoint's files from the storage it was written to and mark it DELETED.

    Unknown, already DELETED and registered (model version) uuids are skipped. A checkpoint
    whose files could not be deleted keeps its record; the answer maps each such uuid to the
    error.
    """
    targets = []
    with store.read() as conn:
        uuids = list(uuids)
        registered = _models.registered_uuids(conn, uuids)
        for uuid in uuids:
            ckpt = _checkpoints.get(conn, uuid)
            # Registered ones are never deleted here (the API refuses them with a reason first).
            if ckpt is None or ckpt["state"] == _checkpoints.DELETED or uuid in registered:
                continue
            targets.append((uuid, checkpoint_storage(conn, ckpt)))
    failed = {}
    for uuid, storage_config in targets:
        try:
            storage.build(storage_config).delete(uuid)
        except Exception as e:  # keep the record; a later delete may succeed
            logger.exception("could not delete checkpoint %s from storage", uuid)
            failed[uuid] = f"{type(e).__name__}: {e}"
            continue
        with store.tx() as conn:
            _checkpoints.update_resources(conn, uuid, None)
    return failed


def remove_checkpoint_files(store: Store, uuids: Iterable[str], globs: list[str]) -> dict[str, str]:
    """Remove the files ``globs`` name from each checkpoint (``det c rm``) and record what is
    left: nothing left is DELETED, fewer files PARTIALLY_DELETED; no globs refreshes the record
    from what the storage holds. DELETED and unknown uuids are skipped; the answer maps each
    checkpoint whose storage failed to the error (its record unchanged)."""
    targets = []
    with store.read() as conn:
        for uuid in uuids:
            ckpt = _checkpoints.get(conn, uuid)
            if ckpt is None or ckpt["state"] == _checkpoints.DELETED:
                continue
            targets.append((uuid, checkpoint_storage(conn, ckpt)))
    failed = {}
    for uuid, storage_config in targets:
        try:
            left = storage.build(storage_config).remove_files(uuid, globs)
        except Exception as e:  # keep the record; the storage says what went wrong
            logger.exception("could not remove files of checkpoint %s", uuid)
            failed[uuid] = f"{type(e).__name__}: {e}"
            continue
        with store.tx() as conn:
            _checkpoints.update_resources(conn, uuid, left or None)
    return failed


def delete_tensorboard_files(store: Store, experiment_id: int, config: dict[str, Any]) -> bool:
    """Delete what the experiment's trials synced to ``<storage>/<cluster id>/tensorboard/
    experiment/<id>``. False when the storage is a bucket (no prefix delete there yet).

    Raises:
        OSError: the files could not be removed.
    """
    manager = storage.build(config.get("checkpoint_storage") or {})
    if not isinstance(manager, storage.DirectoryStorageManager):
        logger.warning(
            "TensorBoard files of experiment %d stay in %s storage: only shared_fs and "
            "directory storage can delete them yet",
            experiment_id,
            (config.get("checkpoint_storage") or {}).get("type"),
        )
        return False
    sync = tensorboard.get_experiment_sync_path(store.cluster_id, experiment_id)
    path = manager.base_path / str(sync)
    if path.exists():
        shutil.rmtree(path)
    return True


def collect_async(store: Store, experiment_id: int) -> None:
    """Run :func:`collect` on its own thread (called when the experiment ends)."""

    def run() -> None:
        try:
            collect(store, experiment_id)
        except Exception:
            logger.exception("checkpoint GC of experiment %d failed", experiment_id)

    threading.Thread(target=run, name=f"gc-{experiment_id}", daemon=True).start()
