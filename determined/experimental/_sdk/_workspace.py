"""``Workspace``: a workspace and its projects (0.37's ``/api/v1/workspaces/...`` routes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined.common.api import Session, _routes
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

    def _hydrate(self, body: Mapping[str, Any]) -> None:
        self.id = int(body["id"])
        self.name = body.get("name")

    @classmethod
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> Workspace:
        ws = cls(session, workspace_id=int(body["id"]))
        ws._hydrate(body)
        return ws

    def reload(self) -> None:
        self._hydrate(_routes.get_workspace(self._session, self.id))

    def list_pools(self) -> list[_resource_pool.ResourcePool]:
        """The resource pools this workspace's tasks may use."""

        def page(offset: int) -> dict[str, Any]:
            return _routes.list_workspace_pools(self._session, self.id, offset)

        names = _paging.read_paginated(page, "resourcePools")
        return [_resource_pool.ResourcePool(self._session, name=str(n)) for n in names]

    def create_project(self, name: str, description: str | None = None) -> _project.Project:
        body = {"name": name, "description": description, "workspaceId": self.id}
        return _project.Project._from_json(
            _routes.create_project(self._session, self.id, body), self._session
        )

    def delete_project(self, name: str) -> None:
        """Delete the project named ``name`` (with its experiments, as in 0.37)."""
        project = self.get_project(name)
        _routes.delete_project(self._session, project.id)

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
            return _routes.list_workspace_projects(self._session, self.id, {"offset": offset})

        found = _paging.read_paginated(page, "projects")
        return [_project.Project._from_json(p, self._session) for p in found]

    def __repr__(self) -> str:
        return f"Workspace(id={self.id}, name={self.name})"
