"""Where a committed checkpoint is announced: a log line (local) or the master (cluster).

This is the only part of ``CheckpointContext`` that differs between the two backends.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from determined import errors
from determined.common.api import Session, _routes

logger = logging.getLogger("determined.core")


class CheckpointReporter(Protocol):
    """Announces committed checkpoints. Only rank 0 reports; ``check`` runs on every rank."""

    def check(self, metadata: Mapping[str, Any]) -> None:
        """Raise ValueError if ``report`` would refuse this metadata. Called before anything
        is written, so that a refused checkpoint never reaches storage."""
        ...

    def report(self, storage_id: str, resources: dict[str, int], metadata: dict[str, Any]) -> None:
        """Announce checkpoint ``storage_id`` (already committed to storage)."""
        ...

    def get_metadata(self, storage_id: str) -> dict[str, Any]: ...

    def mark_deleted(self, storage_id: str) -> None: ...


class LocalCheckpointReporter:
    """Without a master: logs each checkpoint. Any metadata is accepted."""

    def check(self, metadata: Mapping[str, Any]) -> None:
        pass

    def report(self, storage_id: str, resources: dict[str, int], metadata: dict[str, Any]) -> None:
        steps = metadata.get("steps_completed")
        at = "" if steps is None else f" (steps_completed {steps})"
        logger.info(f"saved checkpoint {storage_id}{at}")

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        # As in the reference's DummyCheckpointContext: there is no master to ask. The file is
        # in the checkpoint; read it with restore_path(storage_id) / "metadata.json".
        raise NotImplementedError(
            "get_metadata needs a master; without one, read metadata.json from the checkpoint: "
            "with core_context.checkpoint.restore_path(storage_id) as path: "
            "json.loads((path / 'metadata.json').read_text())"
        )

    def mark_deleted(self, storage_id: str) -> None:
        logger.info(f"deleted checkpoint {storage_id}")


class ClusterCheckpointReporter:
    """Reports to the master with the reference's wire format (``docs/reference/master.md`` §3.2).

    Args:
        session: the trial's session (allocation token).
        task_id, allocation_id: from the cluster info.
        storage_backend_id: the ``storageId`` from ``POST /api/v1/runs/start``; omitted from the
            report when None.
        after_report: called after each successful report (TensorBoard sync in AUTO mode).
    """

    def __init__(
        self,
        session: Session,
        task_id: str,
        allocation_id: str,
        storage_backend_id: int | None,
        after_report: Callable[[], None] | None = None,
    ) -> None:
        self._session = session
        self._task_id = task_id
        self._allocation_id = allocation_id
        self._storage_backend_id = storage_backend_id
        self._after_report = after_report

    def check(self, metadata: Mapping[str, Any]) -> None:
        if "steps_completed" not in metadata:
            raise ValueError(
                "metadata for reported checkpoints requires a 'steps_completed' item, which has "
                "not been provided; pass metadata={'steps_completed': <batches trained>, ...}"
            )

    def report(self, storage_id: str, resources: dict[str, int], metadata: dict[str, Any]) -> None:
        self.check(metadata)
        body: dict[str, Any] = {
            "uuid": storage_id,
            "taskId": self._task_id,
            "allocationId": self._allocation_id,
            "reportTime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "resources": {k: str(v) for k, v in resources.items()},
            "metadata": metadata,
            "state": "STATE_COMPLETED",
            "training": {},
        }
        if self._storage_backend_id is not None:
            body["storageId"] = self._storage_backend_id
        _routes.report_checkpoint(self._session, body)
        logger.info(f"Reported checkpoint to master {storage_id}")
        if self._after_report is not None:
            self._after_report()

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        try:
            checkpoint = _routes.get_checkpoint(self._session, storage_id)
        except errors.MasterNotFound as e:
            raise errors.CheckpointNotFound(
                f"the master knows no checkpoint {storage_id}; check the storage id"
            ) from e
        return dict(checkpoint.get("metadata") or {})

    def mark_deleted(self, storage_id: str) -> None:
        body = {"checkpoints": [{"uuid": storage_id, "resources": {"resources": {}}}]}
        _routes.patch_checkpoints(self._session, body)
