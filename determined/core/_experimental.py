"""Experimental Core API calls: linking a task's metrics to the checkpoint it uses."""

from __future__ import annotations

import logging
from typing import Any

from determined.common.api import Session, _routes

logger = logging.getLogger("determined.core")

_INFERENCE = "TRIAL_SOURCE_INFO_TYPE_INFERENCE"


class ExperimentalCoreContext:
    """Associate this trial with the checkpoint or model version it runs inference on.

    Takes any object with a ``uuid`` (a checkpoint) or with ``checkpoint``, ``model_id`` and
    ``model_version`` (a model version), as the SDK's classes have. Without a master the calls
    only log.
    """

    def __init__(self, session: Session | None = None, trial_id: int | None = None) -> None:
        self._session = session
        self._trial_id = trial_id

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        self._report({"checkpointUuid": checkpoint.uuid})

    def report_task_using_model_version(self, model_version: Any) -> None:
        if model_version.checkpoint is None:
            raise ValueError("the model version has no checkpoint to associate with this task")
        self._report(
            {
                "checkpointUuid": model_version.checkpoint.uuid,
                "modelId": model_version.model_id,
                "modelVersion": model_version.model_version,
            }
        )

    def _report(self, source: dict[str, Any]) -> None:
        if self._session is None:
            logger.info(f"task uses {source}")
            return
        info = {"trialId": self._trial_id, "trialSourceInfoType": _INFERENCE, **source}
        _routes.post_trial_source_info(self._session, info)


class DummyExperimentalCoreContext(ExperimentalCoreContext):
    """The local variant: calls only log."""

    def __init__(self) -> None:
        super().__init__()
