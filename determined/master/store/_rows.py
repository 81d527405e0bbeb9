"""The rows the store's getters return: one key per column of the table in ``_schema`` (a test
checks they match). They are plain dicts, read as ``row["id"]``; ``state`` holds the stored
value of a ``_enums`` member (``State(row["state"])`` gives the member)."""

from __future__ import annotations

import datetime
from typing import Any, TypedDict


class ExperimentRow(TypedDict):
    id: int
    state: str
    config: dict[str, Any]  # fully defaulted
    original_config: str  # as the user wrote it
    model_definition: bytes | None  # tar.gz
    owner_id: int
    parent_id: int | None
    archived: bool
    progress: float | None
    notes: str
    start_time: datetime.datetime
    end_time: datetime.datetime | None
    project_id: int


class TrialRow(TypedDict):
    id: int
    experiment_id: int
    request_id: str
    task_id: str
    state: str
    hparams: dict[str, Any]
    seed: int
    warm_start_checkpoint: str | None
    restarts: int
    run_id: int
    op_length: int | None
    op_complete: bool
    op_closed: bool
    early_exit: str | None
    searcher_units: float
    progress: float | None
    runner_state: str
    total_batches: int
    summary_metrics: dict[str, Any]
    latest_validation_id: int | None
    best_validation_id: int | None
    start_time: datetime.datetime
    end_time: datetime.datetime | None
    log_retention_days: int | None
    archived: bool


class AllocationRow(TypedDict):
    id: str  # "<task_id>.<run_id>"
    task_id: str
    trial_id: int
    run_id: int
    state: str
    resources: list[dict[str, Any]]  # [{resourcesId, address, slots}]
    preempted: bool
    acked: bool
    ready: bool
    exit_code: int | None
    start_time: datetime.datetime
    end_time: datetime.datetime | None


class LiveAllocationRow(AllocationRow):
    """An allocation that has not terminated, with its trial's state."""

    trial_state: str


class CheckpointRow(TypedDict):
    uuid: str
    task_id: str
    allocation_id: str | None
    trial_id: int
    report_time: datetime.datetime
    state: str
    resources: dict[str, str]  # relpath -> size (as the wire's strings)
    metadata: dict[str, Any]
    size: int
    steps_completed: int
    storage_id: int | None
