"""Request bodies of the v1 API. Keys are accepted in lowerCamelCase (as the gateway writes
them) and in snake_case (as some reference clients send them); unknown keys are ignored."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class LoginRequest(_Body):
    username: str
    password: str = ""
    is_hashed: bool = False


class RunnerMetadata(_Body):
    state: str = ""


class MetricsBody(_Body):
    avg_metrics: dict[str, Any] = Field(default_factory=dict)
    batch_metrics: list[Any] | None = None


class TrialMetrics(_Body):
    trial_id: int
    trial_run_id: int
    steps_completed: int
    report_time: str | None = None
    metrics: MetricsBody


class ReportMetrics(_Body):
    group: str
    metrics: TrialMetrics


class ReportTrainingMetrics(_Body):
    training_metrics: TrialMetrics


class ReportValidationMetrics(_Body):
    validation_metrics: TrialMetrics


class CompletedLength(_Body):
    length: int


class CompleteOperation(_Body):
    op: CompletedLength
    searcher_metric: Any = None


class Progress(_Body):
    progress: float
    is_raw: bool = False


class EarlyExit(_Body):
    reason: str


class StartRun(_Body):
    run_id: int
    checkpoint_storage: dict[str, Any] | None = None


class ReportCheckpoint(_Body):
    uuid: str
    task_id: str
    allocation_id: str | None = None
    report_time: str | None = None
    resources: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    state: str | None = None
    training: dict[str, Any] | None = None
    storage_id: int | None = None


class PatchResources(_Body):
    resources: dict[str, Any] | None = None


class PatchCheckpoint(_Body):
    uuid: str
    resources: PatchResources | None = None


class PatchCheckpoints(_Body):
    checkpoints: list[PatchCheckpoint]


class AckPreemption(_Body):
    allocation_id: str | None = None


class AllGather(_Body):
    allocation_id: str | None = None
    request_uuid: str
    num_peers: int
    data: Any = None


class TaskLog(_Body):
    task_id: str
    allocation_id: str | None = None
    agent_id: str | None = None
    container_id: str | None = None
    rank_id: int | None = None
    timestamp: str | None = None
    level: str | None = None
    stdtype: str | None = None
    source: str | None = None
    log: str


class PostTaskLogs(_Body):
    logs: list[TaskLog]


class CreateExperiment(_Body):
    config: str
    parent_id: int | None = None  # a fork: redacted secrets are restored from this experiment
    model_definition: list[Any] | None = None
    activate: bool = True
    validate_only: bool = False
    template: str | None = None  # a config template laid under this config
    project_id: int | None = None  # else the config's workspace/project, else 1
    unmanaged: bool = False  # core_v2: the user's process runs the trials, never the master


class CreateTrial(_Body):
    """``v1CreateTrialRequest``: a trial of an unmanaged experiment."""

    experiment_id: int
    hparams: dict[str, Any] | None = None
    unmanaged: bool = False


class PutTrial(_Body):
    """``v1PutTrialRequest``: find the trial by its external id, or create it."""

    create_trial_request: CreateTrial
    external_trial_id: str


class StartTrial(_Body):
    trial_id: int | None = None
    resume: bool = True


class PatchTrial(_Body):
    """``v1PatchTrialRequest``: no state is a heartbeat."""

    trial_id: int | None = None
    state: str | None = None


class Allocate(_Body):
    resources: list[dict[str, Any]] = Field(default_factory=list)


class AllocationExit(_Body):
    exit_code: int = 0


class PatchExperiment(_Body):
    """``v1PatchExperiment``: only the fields present change."""

    id: int | None = None
    name: str | None = None
    description: str | None = None
    labels: list[str] | None = None
    notes: str | None = None
    resources: dict[str, Any] | None = None
    checkpoint_storage: dict[str, Any] | None = None


class DeleteCheckpoints(_Body):
    checkpoint_uuids: list[str]


class RemoveCheckpointFiles(_Body):
    """``v1CheckpointsRemoveFilesRequest``."""

    checkpoint_uuids: list[str]
    checkpoint_globs: list[str] = Field(default_factory=list)


class PreviewSearch(_Body):
    config: dict[str, Any]
    seed: int | None = None


class ContinueExperiment(_Body):
    id: int | None = None
    override_config: str | None = None


class AlertData(_Body):
    """``v1CustomWebhookEventData``: level is a ``v1LogLevel`` name."""

    title: str = ""
    description: str = ""
    level: str | None = None


class PostAlert(_Body):
    """``v1PostWebhookEventDataRequest``, what ``core.Context.alert()`` sends."""

    data: AlertData = Field(default_factory=AlertData)
    experiment_id: int
    trial_id: int | None = None


class PostRunMetadata(_Body):
    metadata: dict[str, Any]
    run_id: int | None = None


class CheckpointMetadata(_Body):
    metadata: dict[str, Any] = Field(default_factory=dict)


class PostCheckpointMetadata(_Body):
    """0.37's ``v1PostCheckpointMetadataRequest``: only ``checkpoint.metadata`` is read."""

    checkpoint: CheckpointMetadata
