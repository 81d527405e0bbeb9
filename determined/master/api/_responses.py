"""What the main routes answer, as pydantic models: the OpenAPI document (``/openapi.json``)
describes their bodies with them (0.37's v1 messages: ``v1Experiment``, ``v1Trial``,
``v1Checkpoint``, ``v1Agent``, ``v1User``, ...).

They document; they do not build or check an answer. A route still returns the dict that
``_wire`` builds, annotated with one of the ``*Answer`` types below: ``dict[str, Any]`` at run
time (FastAPI serializes it as before, so the wire stays 0.37's to the byte: every null
written, camelCase keys, int64 as strings where the gateway writes them so), the model in the
document. tests/master/test_response_models.py checks a real master's answers against these
models, strictly (every key, no other key, exact types), and that the document names them.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema


class _V1(BaseModel):
    """A v1 message: camelCase keys (grpc-gateway's), and no key it does not declare."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", populate_by_name=True)


class Pagination(_V1):
    offset: int
    limit: int
    start_index: int
    end_index: int
    total: int


# ----------------------------------------------------------------------------- master


class TaskIsolation(_V1):
    """Ours: the sandbox trial and task processes start in (docs/security.md)."""

    mode: str
    setting: str
    detail: str


class ClusterMessage(_V1):
    message: str
    start_time: str | None
    created_time: str | None
    end_time: str | None = None  # left out when the message has no end


class GetMasterResponse(_V1):
    """``GET /api/v1/master``."""

    version: str
    redetermined_version: str
    master_id: str
    cluster_id: str
    cluster_name: str
    telemetry_enabled: bool
    sso_providers: list[dict[str, Any]]
    external_login_uri: str
    external_logout_uri: str
    branding: str
    rbac_enabled: bool
    strict_job_queue_control: bool
    has_custom_logo: bool
    product: str
    user_management_enabled: bool
    feature_switches: list[str]
    task_isolation: TaskIsolation
    cluster_message: ClusterMessage | None = None  # left out when there is none


class MasterInfo(GetMasterResponse):
    """``GET /info``: ``GetMasterResponse`` plus the reference's snake_case keys."""

    cluster_id_: str = Field(alias="cluster_id")
    master_id_: str = Field(alias="master_id")
    cluster_name_: str = Field(alias="cluster_name")


# ----------------------------------------------------------------------------- users


class User(_V1):
    """``v1User``."""

    id: int
    username: str
    admin: bool
    active: bool
    agent_user_group: dict[str, Any] | None  # v1AgentUserGroup
    display_name: str
    modified_at: str | None
    remote: bool
    last_auth_at: str | None


class GetMeResponse(_V1):
    user: User


class GetUsersResponse(_V1):
    users: list[User]
    pagination: Pagination


# ----------------------------------------------------------------------------- experiments


class Experiment(_V1):
    """``v1Experiment``."""

    id: int
    name: str
    description: str
    labels: list[str]
    state: str
    archived: bool
    start_time: str | None
    end_time: str | None
    progress: float | None
    username: str
    display_name: str
    user_id: int
    forked_from: int | None
    resource_pool: str
    num_trials: int
    project_id: int
    project_name: str
    project_owner_id: int
    # Left out for an experiment whose project is gone (not possible through the API).
    workspace_id: int | None = None
    workspace_name: str | None = None
    parent_archived: bool | None = None
    notes: str
    config: dict[str, Any]  # its secrets hidden, but for its own trials
    original_config: str
    duration: int | None  # milliseconds
    parent_id: int | None
    job_id: str
    searcher_type: str
    searcher_metric: str
    hyperparameters: dict[str, Any]
    trial_ids: list[int]
    best_trial_id: int | None
    best_trial_searcher_metric: float | None
    checkpoint_count: int
    checkpoint_size: str  # int64
    model_definition_size: int
    unmanaged: bool
    external_experiment_id: str | None
    external_trial_id: str | None


class GetExperimentResponse(_V1):
    experiment: Experiment
    config: dict[str, Any]
    job_summary: dict[str, Any] | None  # v1JobSummary; always null here


class GetExperimentsResponse(_V1):
    experiments: list[Experiment]
    pagination: Pagination


# ----------------------------------------------------------------------------- trials


class Metrics(_V1):
    """``v1Metrics``."""

    avg_metrics: dict[str, Any] | None
    batch_metrics: list[dict[str, Any]] | None


class MetricsWorkload(_V1):
    """``v1MetricsWorkload``."""

    end_time: str | None
    metrics: Metrics
    num_inputs: int
    total_batches: int


class Trial(_V1):
    """``v1Trial``."""

    id: int
    experiment_id: int
    start_time: str | None
    end_time: str | None
    state: str
    restarts: int
    hparams: dict[str, Any]
    total_batches_processed: int
    best_validation: MetricsWorkload | None
    latest_validation: MetricsWorkload | None
    best_checkpoint: dict[str, Any] | None  # v1CheckpointWorkload; always null here
    runner_state: str
    wall_clock_time: float
    warm_start_checkpoint_uuid: str | None
    task_id: str
    total_checkpoint_size: str  # int64
    checkpoint_count: int
    searcher_metric_value: float | None
    task_ids: list[str]
    summary_metrics: dict[str, Any]
    log_retention_days: int | None
    metadata: dict[str, Any]


class GetTrialResponse(_V1):
    trial: Trial


class GetExperimentTrialsResponse(_V1):
    trials: list[Trial]
    pagination: Pagination


# ----------------------------------------------------------------------------- checkpoints


class CheckpointTrainingMetadata(_V1):
    """``v1CheckpointTrainingMetadata``."""

    trial_id: int
    experiment_id: int
    experiment_config: dict[str, Any]
    hparams: dict[str, Any]
    training_metrics: Metrics
    validation_metrics: Metrics
    searcher_metric: float | None


class Checkpoint(_V1):
    """``v1Checkpoint``."""

    task_id: str | None
    allocation_id: str | None
    uuid: str
    report_time: str | None
    resources: dict[str, str]  # file -> size (int64)
    metadata: dict[str, Any]
    state: str
    training: CheckpointTrainingMetadata
    storage_id: int | None


class GetCheckpointResponse(_V1):
    checkpoint: Checkpoint


class GetCheckpointsResponse(_V1):
    """``GetTrialCheckpointsResponse`` and ``GetExperimentCheckpointsResponse``."""

    checkpoints: list[Checkpoint]
    pagination: Pagination


# ----------------------------------------------------------------------------- agents, tasks


class Device(_V1):
    id: int
    brand: str
    uuid: str
    type: str


class Container(_V1):
    id: str
    parent: str
    state: str
    devices: list[Device]
    permission_denied: bool


class Slot(_V1):
    id: str
    device: Device
    enabled: bool
    draining: bool
    container: Container | None


class SlotStats(_V1):
    total: int
    disabled: int
    draining: int
    states: dict[str, int]


class AgentSlotStats(_V1):
    type_stats: dict[str, SlotStats]
    brand_stats: dict[str, SlotStats]


class Agent(_V1):
    """``v1Agent``: a group of this master's slots."""

    id: str
    registered_time: str | None
    slots: dict[str, Slot]
    containers: dict[str, Container]
    resource_pools: list[str]
    addresses: list[str]
    enabled: bool
    draining: bool
    version: str
    slot_stats: AgentSlotStats


class GetAgentsResponse(_V1):
    agents: list[Agent]
    pagination: Pagination


class GetAgentResponse(_V1):
    agent: Agent


class ProxyPortConfig(_V1):
    port: int
    proxy_tcp: bool
    unauthenticated: bool


class ResourcesSummary(_V1):
    resources_id: str
    resources_type: str
    allocation_id: str
    container_id: str
    agent_devices: dict[str, Any]  # agent id -> {devices: [v1Device]}


class AllocationSummary(_V1):
    """``v1AllocationSummary``: a live allocation (a trial's run or a task)."""

    task_id: str
    allocation_id: str
    name: str
    registered_time: str | None
    resource_pool: str
    slots_needed: int
    scheduler_type: str
    priority: int | None
    proxy_ports: list[ProxyPortConfig]
    resources: list[ResourcesSummary]


class GetTasksResponse(_V1):
    allocation_id_to_summary: dict[str, AllocationSummary]


# ----------------------------------------------------------------------------- as routes use them


@dataclasses.dataclass(frozen=True)
class _DescribedBy:
    """Annotation metadata: the JSON schema of ``model`` in place of its type's own."""

    model: type[BaseModel]

    def __get_pydantic_json_schema__(
        self, _: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # The model's schema asked for as a list's items comes back as a reference to the
        # document's components (asked for directly, pydantic writes it out inline, unnamed).
        items = core_schema.list_schema(self.model.__pydantic_core_schema__)
        return dict(handler(items)["items"])


MasterAnswer = Annotated[dict[str, Any], _DescribedBy(GetMasterResponse)]
InfoAnswer = Annotated[dict[str, Any], _DescribedBy(MasterInfo)]
MeAnswer = Annotated[dict[str, Any], _DescribedBy(GetMeResponse)]
UsersAnswer = Annotated[dict[str, Any], _DescribedBy(GetUsersResponse)]
ExperimentAnswer = Annotated[dict[str, Any], _DescribedBy(GetExperimentResponse)]
ExperimentsAnswer = Annotated[dict[str, Any], _DescribedBy(GetExperimentsResponse)]
TrialAnswer = Annotated[dict[str, Any], _DescribedBy(GetTrialResponse)]
TrialsAnswer = Annotated[dict[str, Any], _DescribedBy(GetExperimentTrialsResponse)]
CheckpointAnswer = Annotated[dict[str, Any], _DescribedBy(GetCheckpointResponse)]
CheckpointsAnswer = Annotated[dict[str, Any], _DescribedBy(GetCheckpointsResponse)]
AgentsAnswer = Annotated[dict[str, Any], _DescribedBy(GetAgentsResponse)]
AgentAnswer = Annotated[dict[str, Any], _DescribedBy(GetAgentResponse)]
TasksAnswer = Annotated[dict[str, Any], _DescribedBy(GetTasksResponse)]
