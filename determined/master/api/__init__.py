"""The master's HTTP API: one router per area, the request and response models, the v1 JSON
shapes (``_wire``), the FastAPI dependencies and the caller's authentication.

Layering: imports ``experiment``, ``ingest``, ``resources``, ``store``, ``searcher`` and
``webhooks`` (and the master's top-level ``_errors`` and ``_signals``); nothing imports it but
the app.
"""

from __future__ import annotations

from fastapi import APIRouter

from determined.master.api import (
    _agents,
    _alerts,
    _allocations,
    _bulk_experiments,
    _checkpoint_files,
    _checkpoint_lists,
    _checkpoints,
    _cluster_message,
    _continue,
    _dev,
    _experiment_edits,
    _experiments,
    _gc_preview,
    _jobs,
    _login,
    _logs,
    _metrics,
    _ntsc,
    _preview,
    _project_columns,
    _projects,
    _proxy,
    _registry,
    _retain_logs,
    _roles,
    _runs,
    _searcher_events,
    _stream,
    _templates,
    _time_series,
    _trials,
    _unmanaged,
    _usage,
    _users,
    _webhooks,
    _webui,
)

# The routers in the order the app includes them. Keep it: where two paths overlap, the route
# included first matches.
ROUTERS: tuple[APIRouter, ...] = (
    _login.router,
    _cluster_message.router,
    _users.router,
    _time_series.router,  # GET /trials/time-series before /trials/{id}
    _trials.router,
    _unmanaged.router,
    _unmanaged.root_router,
    _checkpoints.router,
    _checkpoint_lists.router,
    _checkpoint_files.router,
    _allocations.router,
    _logs.router,
    _experiments.router,
    _experiment_edits.router,
    _bulk_experiments.router,
    _projects.router,
    _project_columns.router,
    _registry.router,
    _continue.router,
    _searcher_events.router,
    _gc_preview.router,
    _metrics.router,
    _alerts.router,  # POST /webhooks/custom before /webhooks/{id}
    _webhooks.router,
    _preview.router,
    _retain_logs.router,
    _templates.router,
    _ntsc.router,
    _proxy.router,
    _webui.router,
    _agents.router,
    _jobs.router,
    _usage.router,
    _runs.router,
    _roles.router,
    _stream.router,  # the /stream websocket
)

# ``/api/v1/dev/...``: allocate, preempt and exit a trial's run by hand (tests and external
# launchers; admins only), included only when asked for.
DEV_ROUTER: APIRouter = _dev.router

__all__ = ["DEV_ROUTER", "ROUTERS"]
