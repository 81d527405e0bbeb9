"""``Workspace``: a workspace and its projects (0.37's ``/api/v1/workspaces/...`` routes)."""

from __future__ import annotations

from typing import Any

from determined.common.api import Session
from determined.experimental._sdk import _find, _paging, _project, _resource_pool


class Workspace:
    """A workspace: get one from ``client.get_workspace(name)`` or ``list_workspaces()``.

    ``Workspace(session, workspace_name=...)`` looks the id up by name.

    Raises:
        ValueError: both or neither of ``workspace_id`` and ``workspace_name`` given.
        LookupError: no workspace has that name.
    """

    def __init__(
        self,
        session: Session,
        workspace_id: int | None = None,
        workspace_name: str | None = None,
    ) -> None:
        if (workspace_id is None) == (workspace_name is None):
            raise ValueError("give exactly one of workspace_id and workspace_name")
        self._session = session
        self.name = workspace_name
        if workspace_name is not None:
            self.id = int(_find.find_workspace(session, workspace_name)["id"])
        else:
            self.id = int(workspace_id or 0)

    def _hydrate(self, body: dict[str, Any]) -> None:
        self.id = int(body["id"])
        self.name = body.get("name")

    @classmethod
    def _from_json(cls, body: dict[str, Any], session: Session) -> Workspace:
        ws = cls(session, workspace_id=int(body["id"]))
        ws._hydrate(body)
        return ws

    def reload(self) -> None:
        self._hydrate(self._session.get(f"/api/v1/workspaces/{self.id}").json()["workspace"])

    def list_pools(self) -> list[_resource_pool.ResourcePool]:
        """The resource pools this workspace's tasks may use."""

        def page(offset: int) -> dict[str, Any]:
            path = f"/api/v1/workspaces/{self.id}/available-resource-pools"
            return dict(self._session.get(path, params={"offset": offset}).json())

        names = _paging.read_paginated(page, "resourcePools")
        return [_resource_pool.ResourcePool(self._session, name=str(n)) for n in names]

    def create_project(self, name: str, description: str | None = None) -> _project.Project:
        body = {"name": name, "description": description, "workspaceId": self.id}
        path = f"/api/v1/workspaces/{self.id}/projects"
        resp = self._session.post(path, json=body).json()
        return _project.Project._from_json(resp["project"], self._session)

    def delete_project(self, name: str) -> None:
        """Delete the project named ``name`` (with its experiments, as in 0.37)."""
        project = self.get_project(name)
        self._session.delete(f"/api/v1/projects/{project.id}")

    def get_project(self, project_name: str) -> _project.Project:
        """Raises LookupError when the workspace has no project of that name."""
        name = self.name or ""
        if not name:
            self.reload()
            name = self.name or ""
        body = _find.find_project(self._session, name, project_name)
        return _project.Project._from_json(body, self._session)

    def list_projects(self) -> list[_project.Project]:
        def page(offset: int) -> dict[str, Any]:
            path = f"/api/v1/workspaces/{self.id}/projects"
            return dict(self._session.get(path, params={"offset": offset}).json())

        found = _paging.read_paginated(page, "projects")
        return [_project.Project._from_json(p, self._session) for p in found]

    def __repr__(self) -> str:
        return f"Workspace(id={self.id}, name={self.name})"
