"""``log_policies`` of the experiment config (0.37's): each new log line of a trial is matched
against its experiment's patterns as it is stored. ``cancel_retries`` makes the trial's next
failure final; ``exclude_node`` keeps its next run off the node that logged the line. This
master runs every trial on one node, so an excluded node leaves none: the trial's next failure
is final too, with the reason in its log."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

import sqlalchemy as sa

from determined.master.store import _experiments, _log_policies, _logs, _time, _trials


def master_line(like: dict[str, Any], text: str) -> dict[str, Any]:
    """A line of the master in a task's log (ERROR level), beside ``like``'s allocation."""
    return {
        "task_id": like["task_id"],
        "allocation_id": like.get("allocation_id"),
        "agent_id": like.get("agent_id"),
        "container_id": None,
        "rank_id": None,
        "timestamp": _time.now(),
        "level": "LOG_LEVEL_ERROR",
        "stdtype": "stdout",
        "source": "master",
        "log": text + "\n",  # as the lines the runs write
    }


def scan(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
    """Record the policies that ``rows`` (just stored) trigger."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_task[str(row["task_id"])].append(row)
    notes: list[dict[str, Any]] = []
    for task_id, lines in by_task.items():
        trial = _trials.trial_by_task(conn, task_id)
        exp = None if trial is None else _experiments.get_experiment(conn, trial["experiment_id"])
        policies = [] if exp is None else exp["config"].get("log_policies") or []
        for policy in policies:
            pattern, action = str(policy["pattern"]), policy["action"]["type"]
            regex = re.compile(pattern)  # checked at create time; re caches it
            for line in lines:
                text = str(line.get("log") or "").rstrip("\r\n")
                if _logs.CONFIG_ECHO.search(text) or not regex.search(text):
                    continue
                node = str(line.get("agent_id") or "")
                if action == "cancel_retries":
                    _log_policies.add_dont_retry(conn, task_id, pattern, node, text)
                elif _log_policies.add_exclude_node(conn, task_id, pattern, node, text):
                    notes.append(
                        master_line(
                            line,
                            f"(log {json.dumps(text)} matched regex {pattern}) therefore will not "
                            f"schedule on {node}",
                        )
                    )
    _logs.append(conn, notes)


def failure_notes(conn: sa.Connection, task_id: str, like: dict[str, Any]) -> list[dict[str, Any]]:
    """The lines 0.37 logs when a ``cancel_retries`` policy makes a failure final."""
    triggers = _log_policies.dont_retry(conn, task_id)
    if not triggers:
        return []
    texts = ["trial failed and matched logs to a don't retry policy"] + [
        f"(log {json.dumps(t['triggering_log'])} matched regex {json.dumps(t['regex'])})"
        for t in triggers
    ]
    return [master_line(like, text) for text in texts]
