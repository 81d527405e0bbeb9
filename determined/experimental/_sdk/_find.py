"""Workspaces and projects found by name (0.37's SDK takes names where the REST API takes
ids)."""

from __future__ import annotations

from typing import Any

from determined.common.api import Session, _routes


def find_workspace(session: Session, name: str) -> dict[str, Any]:
    """The ``v1Workspace`` named ``name``.

    Raises:
        LookupError: no workspace has that name.
    """
    found = _routes.list_workspaces(session, {"name": name}).get("workspaces")
    matches = [w for w in found or [] if w.get("name") == name]
    if not matches:
        raise LookupError(f"workspace {name!r} not found")
    return dict(matches[0])


def find_project(session: Session, workspace_name: str, project_name: str) -> dict[str, Any]:
    """The ``v1Project`` named ``project_name`` in workspace ``workspace_name``.

    Raises:
        LookupError: no such workspace, or no such project in it.
    """
    ws = find_workspace(session, workspace_name)
    resp = _routes.list_workspace_projects(session, int(ws["id"]), {"name": project_name})
    matches = [p for p in resp.get("projects") or [] if p.get("name") == project_name]
    if not matches:
        raise LookupError(f"project {project_name!r} not found in workspace {workspace_name!r}")
    return dict(matches[0])
