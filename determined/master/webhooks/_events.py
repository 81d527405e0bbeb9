"""Which webhooks an event reaches, and what they are sent (0.37's default JSON body and its
Slack message), queued in the outbox inside the transaction that caused the event."""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from typing import Any, cast

import sqlalchemy as sa

from determined.master.store import (
    ExperimentRow,
    TrialRow,
    _experiments,
    _logs,
    _projects,
    _time,
    _trials,
    _webhooks,
)

STATE_CHANGE = "EXPERIMENT_STATE_CHANGE"
TASK_LOG = "TASK_LOG"
CUSTOM = "CUSTOM"
METRIC_THRESHOLD = "METRIC_THRESHOLD_EXCEEDED"
SLACK = "SLACK"
SPECIFIC = "SPECIFIC"

# The reference's defaults for the workspace and project of an experiment that names none.
DEFAULT_WORKSPACE = "Uncategorized"
DEFAULT_PROJECT = "Uncategorized"


def _webhook_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """The experiment's ``integrations.webhooks`` section (``webhook_id``, ``webhook_name``,
    ``exclude``), or None."""
    section = (config.get("integrations") or {}).get("webhooks")
    return section if isinstance(section, dict) else None


def matches(trigger: dict[str, Any], config: dict[str, Any] | None, workspace_id: int) -> bool:
    """Whether a trigger's webhook hears about an experiment (config None: not an experiment).
    As 0.37: ``exclude`` silences every webhook; a webhook bound to a workspace hears only its
    experiments; a SPECIFIC one only experiments that name it by id or name."""
    section = _webhook_config(config) if config is not None else None
    if section and section.get("exclude"):
        return False
    bound = trigger["workspace_id"]
    if bound is not None and bound != workspace_id:
        return False
    if trigger["mode"] != SPECIFIC:
        return True
    if section is None:
        return False
    return trigger["webhook_id"] in (section.get("webhook_id") or []) or trigger["name"] in (
        section.get("webhook_name") or []
    )


def _placed(conn: sa.Connection, exp: ExperimentRow) -> ExperimentRow:
    """``exp`` with its project's and workspace's ids and names (``workspace_id``,
    ``workspace_name``, ``project_name``) for the payloads and the workspace filter."""
    out: dict[str, Any] = dict(exp)
    project = _projects.get_project(conn, int(exp["project_id"] or 1))
    ws_id = 1 if project is None else int(project["workspace_id"])
    ws = _projects.get_workspace(conn, ws_id)
    out["workspace_id"] = ws_id
    out["workspace_name"] = DEFAULT_WORKSPACE if ws is None else ws["name"]
    out["project_name"] = DEFAULT_PROJECT if project is None else project["name"]
    return cast(ExperimentRow, out)


def _extra(exp: ExperimentRow, key: str, default: Any) -> Any:
    value = cast(dict[str, Any], exp).get(key)
    return default if value is None else value


def _workspace_id(exp: ExperimentRow) -> int:
    return int(_extra(exp, "workspace_id", 1))


def _experiment_payload(exp: ExperimentRow, trial_id: int | None = None) -> dict[str, Any]:
    config = exp["config"]
    duration = 0
    if exp["end_time"] is not None and exp["start_time"] is not None:
        delta = _time.as_utc(exp["end_time"]) - _time.as_utc(exp["start_time"])
        duration = int(delta.total_seconds())
    resources = config.get("resources") or {}
    body: dict[str, Any] = {
        "id": exp["id"],
        "state": str(exp["state"]).removeprefix("STATE_"),
        "name": config.get("name") or "",
        "duration": duration,
        "resource_pool": resources.get("resource_pool") or "",
        "slots_per_trial": int(resources.get("slots_per_trial") or 1),
        "workspace": _extra(exp, "workspace_name", config.get("workspace") or DEFAULT_WORKSPACE),
        "project": _extra(exp, "project_name", config.get("project") or DEFAULT_PROJECT),
    }
    if trial_id:
        body["trial_id"] = trial_id
    return body


def default_body(
    trigger_type: str, condition: dict[str, Any], data: dict[str, Any]
) -> dict[str, Any]:
    """0.37's JSON body of a DEFAULT webhook."""
    return {
        "event_id": str(uuid.uuid4()),
        "event_type": trigger_type,
        "timestamp": int(time.time()),
        "condition": condition,
        "event_data": data,
    }


def _duration_text(exp: ExperimentRow) -> str:
    start = exp["start_time"]
    end = exp["end_time"] or _time.now()
    if start is None:
        return "0h 0min"
    minutes, hours = math.modf((_time.as_utc(end) - _time.as_utc(start)).total_seconds() / 3600)
    return f"{int(hours)}h {int(minutes * 60)}min"


def _field(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text}


# state -> (status line, mark before the link, attachment colour, status field)
_SLACK_STATES = {
    "COMPLETED": ("Your experiment completed successfully 🎉", "✅ ", "#13B670", "Completed"),
    "ERROR": ("Your experiment has stopped with errors", "❌ ", "#DD5040", "Errored"),
}


def slack_body(
    exp: ExperimentRow,
    base_url: str,
    custom: dict[str, Any] | None = None,
    trial_id: int | None = None,
) -> dict[str, Any]:
    """A Slack message about an experiment, laid out as 0.37's (status line, a coloured
    attachment with the experiment's link and fields; the alert's fields for a custom event)."""
    state = str(exp["state"]).removeprefix("STATE_")
    name = exp["config"].get("name") or ""
    link = f"{name} (#{exp['id']})"
    if base_url:
        link = f"<{base_url.rstrip('/')}/experiments/{exp['id']} | {link}>"
    if state == "COMPLETED":
        status, mark, colour, shown = (
            "Your experiment completed successfully 🎉",
            "✅ ",
            "#13B670",
            "Completed",
        )
    elif state == "ERROR":
        status, mark, colour, shown = (
            "Your experiment has stopped with errors",
            "❌ ",
            "#DD5040",
            "Errored",
        )
    else:
        status, mark, colour, shown = (
            f"The status of your experiment is {state}",
            "",
            "#009bde",
            state,
        )
    fields = [_field(f"*Status*: {shown}"), _field(f"*Duration*: {_duration_text(exp)}")]
    config = exp["config"]
    workspace = _extra(exp, "workspace_name", config.get("workspace") or DEFAULT_WORKSPACE)
    project = _extra(exp, "project_name", config.get("project") or DEFAULT_PROJECT)
    fields.append(_field(f"*Workspace*: {workspace}"))
    fields.append(_field(f"*Project*: {project}"))
    if trial_id:
        fields.append(_field(f"*Trial ID*: {trial_id}"))
    message: dict[str, Any] = {"type": "section", "text": {"type": "plain_text", "text": status}}
    if custom is not None:
        message["fields"] = [
            _field(f"*Level*: {custom.get('level', '')}"),
            _field(f"*Title*: {custom.get('title', '')}"),
            _field(f"*Description*: {custom.get('description', '')}"),
        ]
    experiment_block = {"type": "section", "text": _field(mark + link), "fields": fields}
    return {"blocks": [message], "attachments": [{"color": colour, "blocks": [experiment_block]}]}


def experiment_state_changed(conn: sa.Connection, exp: ExperimentRow, base_url: str) -> None:
    """Queue an event for every state-change trigger on the experiment's new state."""
    state = str(exp["state"]).removeprefix("STATE_")
    triggers = [
        t
        for t in _webhooks.triggers_of_type(conn, STATE_CHANGE)
        if (t["condition"] or {}).get("state") == state
    ]
    if triggers:
        exp = _placed(conn, exp)
    for t in triggers:
        if not matches(t, exp["config"], _workspace_id(exp)):
            continue
        if t["webhook_type"] == SLACK:
            body = slack_body(exp, base_url)
        else:
            body = default_body(
                STATE_CHANGE, {"state": state}, {"experiment": _experiment_payload(exp)}
            )
        _webhooks.enqueue(conn, t["url"], json.dumps(body))


def custom_alert(
    conn: sa.Connection,
    experiment_id: int,
    trial_id: int | None,
    data: dict[str, Any],
    base_url: str,
) -> None:
    """Queue ``core.Context.alert()``'s event for the experiment's CUSTOM triggers."""
    triggers = _webhooks.triggers_of_type(conn, CUSTOM)
    if not triggers:
        return
    exp = _placed(conn, _experiments.require_experiment(conn, experiment_id))
    for t in triggers:
        if not matches(t, exp["config"], _workspace_id(exp)):
            continue
        if t["webhook_type"] == SLACK:
            body = slack_body(exp, base_url, custom=data, trial_id=trial_id)
        else:
            payload = default_body(
                CUSTOM,
                {"state": str(exp["state"]).removeprefix("STATE_")},
                {"experiment": _experiment_payload(exp, trial_id), "custom_data": data},
            )
            body = payload
        _webhooks.enqueue(conn, t["url"], json.dumps(body))


def task_logs(conn: sa.Connection, rows: list[dict[str, Any]], base_url: str) -> None:
    """Queue one event per task and TASK_LOG trigger whose regex a new line matches (0.37
    fires each trigger at most once per task)."""
    if not rows:
        return
    triggers = _webhooks.triggers_of_type(conn, TASK_LOG)
    if not triggers:
        return
    compiled = []
    for t in triggers:
        try:
            compiled.append((t, re.compile(str((t["condition"] or {}).get("regex", "")))))
        except re.error:
            continue  # refused at create time; an old row must not break log ingestion
    for row in rows:
        text = str(row.get("log") or "")
        if _logs.CONFIG_ECHO.search(text):
            continue
        for t, regex in compiled:
            if not regex.search(text):
                continue
            trial = _trials.trial_by_task(conn, str(row["task_id"]))
            exp = (
                None if trial is None else _experiments.get_experiment(conn, trial["experiment_id"])
            )
            exp = None if exp is None else _placed(conn, exp)
            if exp is not None and not matches(t, exp["config"], _workspace_id(exp)):
                continue
            if exp is None and t["mode"] == SPECIFIC:
                continue
            if not _webhooks.first_firing(conn, str(row["task_id"]), int(t["id"])):
                continue
            node = str(row.get("agent_id") or "")
            if t["webhook_type"] == SLACK:
                body = _slack_log_body(row, trial, node, t["condition"]["regex"], base_url)
            else:
                body = default_body(
                    TASK_LOG,
                    {"regex": t["condition"]["regex"]},
                    {
                        "task_log": {
                            "task_id": row["task_id"],
                            "node_name": node,
                            "triggering_log": text,
                        }
                    },
                )
            _webhooks.enqueue(conn, t["url"], json.dumps(body))


def _slack_log_body(
    row: dict[str, Any], trial: TrialRow | None, node: str, regex: str, base_url: str
) -> dict[str, Any]:
    text = str(row.get("log") or "")
    if trial is not None:
        msg = (
            f"Experiment ID `{trial['experiment_id']}`, Trial ID `{trial['id']}`, running on node "
            f"`{node}`, reported a log\n```{text}```\nThis log matched the regex\n```{regex}```\n"
        )
        path = f"/trials/{trial['id']}"
        msg += (
            f"<{base_url.rstrip('/')}{path} | View full logs here>"
            if base_url
            else (f"View full logs at {path}")
        )
    else:
        msg = (
            f"Task ID `{row['task_id']}`, running on node `{node}`, reported a log\n"
            f"```{text}```\nThis log matched the regex\n```{regex}```\n"
        )
    return {"blocks": [{"type": "section", "text": _field(msg)}]}


def metric_threshold(condition: Any) -> tuple[str, float] | None:
    """``(metricName, metricValue)`` of a METRIC_THRESHOLD_EXCEEDED condition, or None."""
    if not isinstance(condition, dict):
        return None
    name, value = condition.get("metricName"), condition.get("metricValue")
    if not isinstance(name, str) or not name:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return name, float(value)


def metrics_reported(
    conn: sa.Connection,
    trial_id: int,
    group: str,
    metrics: dict[str, Any],
    triggers: list[dict[str, Any]],
    base_url: str,
) -> None:
    """Queue an event for each METRIC_THRESHOLD_EXCEEDED trigger whose metric the report
    carries above its threshold, once per trial and trigger (0.37 stores these triggers but
    never fires them; here a metric above ``metricValue`` does)."""
    exp: ExperimentRow | None = None
    for t in triggers:
        parsed = metric_threshold(t["condition"])
        if parsed is None:
            continue
        name, threshold = parsed
        value = metrics.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= threshold:
            continue
        trial = _trials.require_trial(conn, trial_id)
        if exp is None:
            exp = _placed(conn, _experiments.require_experiment(conn, trial["experiment_id"]))
        if not matches(t, exp["config"], _workspace_id(exp)):
            continue
        if not _webhooks.first_firing(conn, str(trial["task_id"]), int(t["id"])):
            continue
        if t["webhook_type"] == SLACK:
            text = (
                f"Experiment ID `{exp['id']}`, Trial ID `{trial_id}` reported {group} metric "
                f"`{name}` = {value}, above the threshold {threshold}"
            )
            body: dict[str, Any] = {"blocks": [{"type": "section", "text": _field(text)}]}
        else:
            body = default_body(
                METRIC_THRESHOLD,
                {"metricName": name, "metricValue": threshold},
                {
                    "experiment": _experiment_payload(exp, trial_id),
                    "metric": {"group": group, "name": name, "value": value},
                },
            )
        _webhooks.enqueue(conn, t["url"], json.dumps(body))


def test_body(webhook: dict[str, Any]) -> dict[str, Any]:
    """What ``POST /api/v1/webhooks/{id}/test`` sends."""
    if webhook["webhook_type"] == SLACK:
        return {"blocks": [{"type": "section", "text": {"type": "plain_text", "text": "test"}}]}
    return default_body(STATE_CHANGE, {"state": "COMPLETED"}, {"data": "test"})
