"""``Project``: a project of a workspace and its experiments (0.37's
``/api/v1/projects/...`` routes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined.common.api import Session, _routes
from determined.experimental._sdk import _experiment, _paging


class Project:
    """A project: get one from ``Workspace.get_project`` / ``create_project``.

    Attributes (cached; :meth:`reload` refreshes them): ``id``, ``name``, ``archived``,
    ``description``, ``n_active_experiments``, ``n_experiments``, ``notes``,
    ``workspace_id``, ``username``, ``key``.
    """

    def __init__(self, session: Session, project_id: int) -> None:
        self._session = session
        self.id = project_id
        self.archived: bool | None = None
        self.description: str | None = None
        self.n_active_experiments: int | None = None
        self.n_experiments: int | None = None
        self.name: str | None = None
        self.notes: list[dict[str, Any]] | None = None
        self.workspace_id: int | None = None
        self.username: str | None = None
        self.key: str | None = None

    def _hydrate(self, body: Mapping[str, Any]) -> None:
        self.id = int(body["id"])
        self.archived = body.get("archived")
        self.description = body.get("description")
        self.n_active_experiments = body.get("numActiveExperiments")
        self.n_experiments = body.get("numExperiments")
        self.name = body.get("name")
        self.notes = list(body.get("notes") or [])
        self.workspace_id = body.get("workspaceId")
        self.username = body.get("username")
        self.key = body.get("key")

    @classmethod
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> Project:
        project = cls(session, int(body["id"]))
        project._hydrate(body)
        return project

    def reload(self) -> None:
        self._hydrate(_routes.get_project(self._session, self.id))

    def list_experiments(self) -> list[_experiment.Experiment]:
        """The project's experiments."""

        def page(offset: int) -> dict[str, Any]:
            return _routes.list_experiments(self._session, project_id=self.id, offset=offset)

        found = _paging.read_paginated(page, "experiments")
        # Filtered here too: a master that ignores projectId lists every experiment.
        return [
            _experiment.Experiment._from_json(e, self._session)
            for e in found
            if e.get("projectId") in (None, self.id)
        ]

    def _patch(self, **fields: Any) -> _routes.Project:
        return _routes.patch_project(self._session, self.id, fields)

    def set_description(self, description: str) -> None:
        self.description = self._patch(description=description).get("description", description)

    def set_key(self, key: str) -> None:
        self.key = self._patch(key=key).get("key", key)

    def set_name(self, name: str) -> None:
        self.name = self._patch(name=name).get("name", name)

    def archive(self) -> None:
        _routes.project_action(self._session, self.id, "archive")
        self.archived = True

    def unarchive(self) -> None:
        _routes.project_action(self._session, self.id, "unarchive")
        self.archived = False

    def _put_notes(self, notes: list[dict[str, Any]]) -> None:
        self.notes = _routes.put_project_notes(self._session, self.id, notes)

    def add_note(self, name: str, contents: str) -> None:
        """Add a note, or replace the contents of the note named ``name``."""
        self.reload()
        notes = [n for n in self.notes or [] if n.get("name") != name]
        self._put_notes(notes + [{"name": name, "contents": contents}])

    def remove_note(self, name: str) -> None:
        """Remove the note named ``name``.

        Raises:
            ValueError: the project has no such note.
        """
        self.reload()
        notes = self.notes or []
        kept = [n for n in notes if n.get("name") != name]
        if len(kept) == len(notes):
            raise ValueError(f"project {self.name!r} has no note named {name!r}")
        self._put_notes(kept)

    def __repr__(self) -> str:
        return f"Project(id={self.id}, name={self.name})"
