"""The master's tables (SQLAlchemy Core), and the contract each one keeps.

Contract of the store:

- Every write the master acknowledges over HTTP is committed before the answer is sent; SQLite
  runs in WAL mode with ``synchronous=FULL`` so a ``kill -9`` of the master loses none of them.
- Metrics are never deleted: a restarted trial's rows past its resume point are *archived*
  (``archived = true``) and every read skips archived rows.
- Experiments and trials move only through the transitions of ``experiment/_states.py``;
  terminal ones are not modified again.
- The Alembic revisions in ``_migrations/versions`` create exactly these tables; a test compares
  the migrated database with this module.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# The store's own facts: the cluster id (kept across restarts), schema notes.
cluster_info = sa.Table(
    "cluster_info",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("username", sa.String(255), nullable=False, unique=True),
    # NULL: the empty password (the reference's default users have none).
    sa.Column("password_hash", sa.Text, nullable=True),
    sa.Column("admin", sa.Boolean, nullable=False, default=False),
    sa.Column("active", sa.Boolean, nullable=False, default=True),
    sa.Column("display_name", sa.String(255), nullable=True),
    sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
    # {agentUid, agentGid, agentUser, agentGroup}: the OS identity a root master runs the
    # user's tasks as (det user link-with-agent-user); NULL: not linked.
    sa.Column("agent_user_group", sa.JSON, nullable=True),
)

# Tokens are stored as sha256 digests: a copy of the database does not grant access.
tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),  # "user" | "allocation"
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("allocation_id", sa.String(255), nullable=True, index=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked", sa.Boolean, nullable=False, default=False),
)

experiments = sa.Table(
    "experiments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("config", sa.JSON, nullable=False),  # fully defaulted
    sa.Column("original_config", sa.Text, nullable=False),  # as the user wrote it
    sa.Column("model_definition", sa.LargeBinary, nullable=True),  # tar.gz
    sa.Column("owner_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("parent_id", sa.Integer, nullable=True),
    sa.Column("archived", sa.Boolean, nullable=False, default=False),
    sa.Column("progress", sa.Float, nullable=True),
    sa.Column("notes", sa.Text, nullable=False, default=""),
    sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
    # The project it is filed under (``projects.id``; 1: the default "Uncategorized"). No
    # foreign key: SQLite cannot add one to an existing table; the API checks it.
    sa.Column("project_id", sa.Integer, nullable=False, server_default="1", index=True),
)

# The search method's state, rewritten in the same transaction as each event it handled.
searcher_snapshots = sa.Table(
    "searcher_snapshots",
    metadata,
    sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), primary_key=True),
    sa.Column("snapshot", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

trials = sa.Table(
    "trials",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
    sa.Column("request_id", sa.String(64), nullable=False),
    sa.Column("task_id", sa.String(255), nullable=False, unique=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("hparams", sa.JSON, nullable=False),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("warm_start_checkpoint", sa.String(64), nullable=True),
    sa.Column("restarts", sa.Integer, nullable=False, default=0),
    sa.Column("run_id", sa.Integer, nullable=False, default=0),  # of the newest allocation
    # Searcher state of the trial (docs/reference/master.md §4.2): the pending ValidateAfter
    # length, whether it is complete, whether the search closed the trial.
    sa.Column("op_length", sa.BigInteger, nullable=True),
    sa.Column("op_complete", sa.Boolean, nullable=False, default=True),
    sa.Column("op_closed", sa.Boolean, nullable=False, default=False),
    sa.Column("early_exit", sa.String(64), nullable=True),
    sa.Column("searcher_units", sa.Float, nullable=False, default=0.0),
    sa.Column("progress", sa.Float, nullable=True),
    sa.Column("runner_state", sa.String(64), nullable=False, default=""),
    sa.Column("total_batches", sa.BigInteger, nullable=False, default=0),
    sa.Column("summary_metrics", sa.JSON, nullable=False),
    sa.Column("latest_validation_id", sa.Integer, nullable=True),
    sa.Column("best_validation_id", sa.Integer, nullable=True),
    sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
    # Days its logs are kept after it ends (``det t set log-retention``); null: the master's
    # ``retention_policy.log_retention_days``; -1: forever.
    sa.Column("log_retention_days", sa.Integer, nullable=True),
    # Hidden from run searches (0.37's ``/api/v1/runs/archive``); only ended trials.
    sa.Column("archived", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.UniqueConstraint("experiment_id", "request_id", name="uq_trials_request"),
)

# One row per run of a trial (the reference's allocation); id is "<task_id>.<run_id>".
allocations = sa.Table(
    "allocations",
    metadata,
    sa.Column("id", sa.String(255), primary_key=True),
    sa.Column("task_id", sa.String(255), nullable=False, index=True),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), nullable=False, index=True),
    sa.Column("run_id", sa.Integer, nullable=False),
    sa.Column("state", sa.String(32), nullable=False),  # see _enums.AllocationState
    sa.Column("resources", sa.JSON, nullable=False),  # [{resourcesId, address, slots}]
    sa.Column("preempted", sa.Boolean, nullable=False, default=False),
    sa.Column("acked", sa.Boolean, nullable=False, default=False),
    sa.Column("ready", sa.Boolean, nullable=False, default=False),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
)

# What the usage reports read of a trial's run (0.37's ``allocation_workspace_info``): the
# workspace it ran in, written when it starts, its end when it ends. It outlives the run's
# experiment (deleting one keeps its usage) and a move of its project. No foreign keys for that.
allocation_usage = sa.Table(
    "allocation_usage",
    metadata,
    sa.Column("allocation_id", sa.String(255), primary_key=True),
    sa.Column("experiment_id", sa.Integer, nullable=False),
    sa.Column("owner_id", sa.Integer, nullable=False),
    sa.Column("workspace_id", sa.Integer, nullable=True),
    sa.Column("workspace_name", sa.Text, nullable=False),
    sa.Column("resource_pool", sa.String(255), nullable=False),
    sa.Column("slots", sa.Integer, nullable=False),
    sa.Column("start_time", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
)

metrics = sa.Table(
    "metrics",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), nullable=False),
    sa.Column("trial_run_id", sa.Integer, nullable=False),
    sa.Column("metric_group", sa.String(255), nullable=False),
    # "TRAINING" | "VALIDATION" | "GENERIC": the rollback rule differs within/across partitions.
    sa.Column("partition", sa.String(16), nullable=False),
    sa.Column("steps_completed", sa.BigInteger, nullable=False),
    sa.Column("metrics", sa.JSON, nullable=False),  # avgMetrics
    sa.Column("batch_metrics", sa.JSON, nullable=True),
    sa.Column("report_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("archived", sa.Boolean, nullable=False, default=False),
    sa.Index("ix_metrics_trial_group_steps", "trial_id", "metric_group", "steps_completed"),
)

storage_backends = sa.Table(
    "storage_backends",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),  # of the canonical JSON
    sa.Column("config", sa.JSON, nullable=False),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("uuid", sa.String(64), primary_key=True),
    sa.Column("task_id", sa.String(255), nullable=False, index=True),
    sa.Column("allocation_id", sa.String(255), nullable=True),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), nullable=False, index=True),
    sa.Column("report_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("resources", sa.JSON, nullable=False),  # relpath -> size (as the wire's strings)
    sa.Column("metadata", sa.JSON, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("steps_completed", sa.BigInteger, nullable=False),
    sa.Column("storage_id", sa.Integer, sa.ForeignKey("storage_backends.id"), nullable=True),
)

task_logs = sa.Table(
    "task_logs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.String(255), nullable=False),
    sa.Column("allocation_id", sa.String(255), nullable=True),
    sa.Column("agent_id", sa.String(255), nullable=True),
    sa.Column("container_id", sa.String(255), nullable=True),
    sa.Column("rank_id", sa.Integer, nullable=True),
    sa.Column("timestamp", sa.DateTime(timezone=True), nullable=False),
    sa.Column("level", sa.String(32), nullable=True),
    sa.Column("stdtype", sa.String(32), nullable=True),
    sa.Column("source", sa.String(32), nullable=True),
    sa.Column("log", sa.Text, nullable=False),
    sa.Index("ix_task_logs_task_id", "task_id", "id"),
)

# What a trial raised with ``core.Context.alert()`` (0.37 posts it to the custom webhook
# trigger); the web UI's experiment and trial pages and ``det e describe`` show them.
alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False, index=True
    ),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), nullable=True),
    sa.Column("level", sa.String(32), nullable=False),  # a v1LogLevel name: LOG_LEVEL_INFO, ...
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

# ``TrainContext.set_metadata()``: one JSON object per run (a trial), replaced on each post.
run_metadata = sa.Table(
    "run_metadata",
    metadata,
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), primary_key=True),
    sa.Column("metadata", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# Webhooks (0.37's): where to POST, on which triggers. ``workspace_id`` null: every workspace.
webhooks = sa.Table(
    "webhooks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("webhook_type", sa.String(32), nullable=False),  # DEFAULT | SLACK
    sa.Column("mode", sa.String(32), nullable=False),  # WORKSPACE | SPECIFIC
    sa.Column("workspace_id", sa.Integer, nullable=True),
)

webhook_triggers = sa.Table(
    "webhook_triggers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("webhook_id", sa.Integer, sa.ForeignKey("webhooks.id"), nullable=False, index=True),
    # EXPERIMENT_STATE_CHANGE | TASK_LOG | CUSTOM | METRIC_THRESHOLD_EXCEEDED
    sa.Column("trigger_type", sa.String(64), nullable=False, index=True),
    sa.Column("condition", sa.JSON, nullable=False),
)

# The outbox: an event is queued in the transaction that caused it and deleted once delivered
# (or given up on), so a master restart neither loses nor repeats a committed delivery.
webhook_events = sa.Table(
    "webhook_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False, index=True),
)

# A task-log trigger fires once per task (as in 0.37), not once per matching line.
webhook_task_log_fired = sa.Table(
    "webhook_task_log_fired",
    metadata,
    sa.Column("task_id", sa.String(255), primary_key=True),
    sa.Column("trigger_id", sa.Integer, sa.ForeignKey("webhook_triggers.id"), primary_key=True),
)

# Log policies (``log_policies`` in the experiment config) that a task's lines triggered: the
# first line per task and regex counts.
log_policy_dont_retry = sa.Table(
    "log_policy_dont_retry",
    metadata,
    sa.Column("task_id", sa.String(255), primary_key=True),
    sa.Column("regex", sa.Text, primary_key=True),
    sa.Column("node_name", sa.String(255), nullable=False),
    sa.Column("triggering_log", sa.Text, nullable=False),
)

log_policy_exclude_node = sa.Table(
    "log_policy_exclude_node",
    metadata,
    sa.Column("task_id", sa.String(255), primary_key=True),
    sa.Column("node_name", sa.String(255), primary_key=True),
    sa.Column("regex", sa.Text, primary_key=True),
    sa.Column("triggering_log", sa.Text, nullable=False),
)

# The admin's cluster-wide message (0.37's): setting one ends the previous one.
cluster_messages = sa.Table(
    "cluster_messages",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
    sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("created_by", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
)

# Config templates (0.37's): a named config laid under an experiment's at create time.
templates = sa.Table(
    "templates",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("workspace_id", sa.Integer, nullable=False, server_default="1"),
    sa.Column("created_by", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
)

# Workspaces and projects (0.37's): every experiment is filed under a project, every project
# under a workspace. Id 1 of each is the default "Uncategorized", which cannot be changed.
workspaces = sa.Table(
    "workspaces",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("archived", sa.Boolean, nullable=False, default=False),
    sa.Column("immutable", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # 0.37's workspace settings: the checkpoint storage and resource pools its experiments and
    # tasks default to, and the agent user/group it records (tasks here run as the master's).
    sa.Column("checkpoint_storage_config", sa.JSON, nullable=True),
    sa.Column("default_compute_pool", sa.String(255), nullable=False, server_default=""),
    sa.Column("default_aux_pool", sa.String(255), nullable=False, server_default=""),
    sa.Column("agent_user_group", sa.JSON, nullable=True),
)

# Who pinned which workspace (0.37's workspace pins): its creator pins a new one.
workspace_pins = sa.Table(
    "workspace_pins",
    metadata,
    sa.Column("workspace_id", sa.Integer, sa.ForeignKey("workspaces.id"), primary_key=True),
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), primary_key=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column(
        "workspace_id", sa.Integer, sa.ForeignKey("workspaces.id"), nullable=False, index=True
    ),
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("key", sa.String(16), nullable=False, unique=True),
    sa.Column("archived", sa.Boolean, nullable=False, default=False),
    sa.Column("immutable", sa.Boolean, nullable=False, default=False),
    sa.Column("notes", sa.JSON, nullable=False),  # [{name, contents}]
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("workspace_id", "name", name="uq_projects_workspace_name"),
)

# The model registry: named models, each with numbered versions that point at checkpoints.
models = sa.Table(
    "models",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("metadata", sa.JSON, nullable=False),
    sa.Column("labels", sa.JSON, nullable=False),
    sa.Column("notes", sa.Text, nullable=False, default=""),
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("workspace_id", sa.Integer, sa.ForeignKey("workspaces.id"), nullable=False),
    sa.Column("archived", sa.Boolean, nullable=False, default=False),
    sa.Column("creation_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_updated_time", sa.DateTime(timezone=True), nullable=False),
)

# A registered checkpoint is never garbage-collected nor deleted (the foreign key keeps its
# record; the GC and the delete route check this table).
model_versions = sa.Table(
    "model_versions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("model_id", sa.Integer, sa.ForeignKey("models.id"), nullable=False, index=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column(
        "checkpoint_uuid",
        sa.String(64),
        sa.ForeignKey("checkpoints.uuid"),
        nullable=False,
        index=True,
    ),
    sa.Column("name", sa.String(255), nullable=False, default=""),
    sa.Column("comment", sa.Text, nullable=False, default=""),
    sa.Column("notes", sa.Text, nullable=False, default=""),
    sa.Column("metadata", sa.JSON, nullable=False),
    sa.Column("labels", sa.JSON, nullable=False),
    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("creation_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_updated_time", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("model_id", "version", name="uq_model_versions_version"),
)

# Unmanaged experiments (core_v2): created by a user's own process, never scheduled. A row here
# is what makes an experiment unmanaged; external ids let a rerun find its experiment again.
unmanaged_experiments = sa.Table(
    "unmanaged_experiments",
    metadata,
    sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), primary_key=True),
    sa.Column("external_id", sa.String(255), nullable=True, unique=True),
)

unmanaged_trials = sa.Table(
    "unmanaged_trials",
    metadata,
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id"), primary_key=True),
    sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
    sa.Column("external_id", sa.String(255), nullable=True),
    # When its process last said it lives (a start or a PATCH: state or heartbeat); a running
    # trial silent for the master's unmanaged trial timeout is marked ERROR, as 0.37 does.
    sa.Column("last_activity", sa.DateTime(timezone=True), nullable=True),
    sa.UniqueConstraint("experiment_id", "external_id", name="uq_unmanaged_trials_external"),
)

# Agents and slots an admin disabled (0.37's ``det agent|slot disable``), kept across restarts:
# one row per agent (``slot_id`` '') or slot that is not plainly enabled.
agent_states = sa.Table(
    "agent_states",
    metadata,
    sa.Column("agent_id", sa.String(255), primary_key=True),
    sa.Column("slot_id", sa.String(64), primary_key=True),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("draining", sa.Boolean, nullable=False),
)

# Where a job stands in the queue (0.37's ``aheadOf``/``behindOf``): jobs without a row stand at
# their experiment id; a smaller position goes first among jobs of one priority.
job_positions = sa.Table(
    "job_positions",
    metadata,
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("position", sa.Float, nullable=False),
)

# Tasks that are not trials (0.37's commands, notebooks, shells, TensorBoards and generic
# tasks): one row each, scheduled on the same slots as trials. ``id`` is a uuid like 0.37's
# task ids; its one allocation is ``<id>.1``.
tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("id", sa.String(255), primary_key=True),
    sa.Column("type", sa.String(32), nullable=False),  # COMMAND | NOTEBOOK | SHELL | ...
    sa.Column("owner_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),  # taskv1State without its prefix
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("context", sa.LargeBinary, nullable=True),  # tar.gz of the context directory
    sa.Column("data", sa.JSON, nullable=True),  # type-specific: experiment ids, ssh keys
    sa.Column("slots", sa.Integer, nullable=False),
    sa.Column("allocation_id", sa.String(255), nullable=True),
    sa.Column("ports", sa.JSON, nullable=True),  # {"name": port} once running
    sa.Column("kill_requested", sa.Boolean, nullable=False, default=False),
    sa.Column("exit_status", sa.Text, nullable=True),
    sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
)

# 0.37's trial source infos: a trial (an inference or fine-tuning run) reports the checkpoint,
# or model version, it started from; the checkpoint's and version's metrics routes read the
# reports of those trials. No foreign keys: deleting an experiment removes its rows itself.
trial_source_infos = sa.Table(
    "trial_source_infos",
    metadata,
    sa.Column("trial_id", sa.Integer, nullable=False, index=True),
    sa.Column("checkpoint_uuid", sa.String(64), nullable=False, index=True),
    sa.Column("trial_source_info_type", sa.String(64), nullable=False),
    sa.Column("model_id", sa.Integer, nullable=True),
    sa.Column("model_version", sa.Integer, nullable=True),
    sa.UniqueConstraint("trial_id", "checkpoint_uuid", name="uq_trial_source_infos"),
)
