"""``Model`` and ``ModelVersion``: the model registry (0.37's ``/api/v1/models/...`` routes)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from determined.common.api import Session, _routes
from determined.experimental._sdk import _checkpoint, _metrics, _paging
from determined.experimental._sdk._enums import OrderBy


class ModelVersion:
    """A checkpoint registered under a model, with a version number from 1.

    Attributes (cached; :meth:`reload` refreshes them): ``model_name``, ``model_version``,
    ``model_id``, ``checkpoint`` (a :class:`Checkpoint`), ``metadata``, ``name``, ``comment``,
    ``notes``.
    """

    def __init__(self, session: Session, model_version: int, model_name: str) -> None:
        self._session = session
        self.model_name = model_name
        self.model_version = model_version
        self.model_id: int | None = None
        self.checkpoint: _checkpoint.Checkpoint | None = None
        self.metadata: dict[str, Any] | None = None
        self.name: str | None = None
        self.comment: str | None = None
        self.notes: str | None = None

    def _hydrate(self, body: Mapping[str, Any]) -> None:
        ckpt = body.get("checkpoint")
        self.checkpoint = _checkpoint.Checkpoint._from_json(ckpt, self._session) if ckpt else None
        self.metadata = body.get("metadata") or {}
        self.comment = body.get("comment") or ""
        self.notes = body.get("notes") or ""
        self.model_version = int(body.get("version") or self.model_version)
        self.model_id = (body.get("model") or {}).get("id")
        self.name = body.get("name")

    @classmethod
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> ModelVersion:
        version = cls(session, int(body["version"]), str(body["model"]["name"]))
        version._hydrate(body)
        return version

    def reload(self) -> None:
        self._hydrate(_routes.get_model_version(self._session, self.model_name, self.model_version))

    def set_name(self, name: str) -> None:
        fields = {"name": name}
        _routes.patch_model_version(self._session, self.model_name, self.model_version, fields)
        self.name = name

    def set_notes(self, notes: str) -> None:
        fields = {"notes": notes}
        _routes.patch_model_version(self._session, self.model_name, self.model_version, fields)
        self.notes = notes

    def delete(self) -> None:
        _routes.delete_model_version(self._session, self.model_name, self.model_version)

    def iter_metrics(self, group: str | None = None) -> Iterator[_metrics.TrialMetrics]:
        """Metrics reported by tasks that used this version (0.37: inference metrics)."""
        params: dict[str, Any] = {"trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE"}
        if group is not None:
            params["metricGroup"] = group
        resp = _routes.get_model_version_metrics(
            self._session, self.model_name, self.model_version, params
        )
        for report in resp.get("metrics") or []:
            yield _metrics.TrialMetrics._from_json(report, group)

    def get_metrics(self, group: str | None = None) -> Iterable[_metrics.TrialMetrics]:
        """Deprecated in 0.37: :meth:`iter_metrics`."""
        return self.iter_metrics(group)

    def __repr__(self) -> str:
        return f"ModelVersion(model={self.model_name}, version={self.model_version})"


class Model:
    """A model of the registry: get one from ``client.create_model`` or ``client.get_model``.

    Attributes (cached; :meth:`reload` refreshes them): ``name``, ``model_id``,
    ``description``, ``creation_time``, ``last_updated_time``, ``metadata``, ``labels``,
    ``username``, ``workspace_id``, ``archived``.
    """

    def __init__(self, session: Session, name: str) -> None:
        self._session = session
        self.name = name
        self.model_id: int | None = None
        self.description: str | None = None
        self.creation_time: datetime.datetime | None = None
        self.last_updated_time: datetime.datetime | None = None
        self.metadata: dict[str, Any] | None = None
        self.labels: list[str] | None = None
        self.username: str | None = None
        self.workspace_id: int | None = None
        self.archived: bool | None = None

    def _hydrate(self, body: Mapping[str, Any]) -> None:
        self.name = str(body.get("name") or self.name)
        self.model_id = body.get("id")
        self.description = body.get("description") or ""
        self.creation_time = _metrics.parse_time(body.get("creationTime"))
        self.last_updated_time = _metrics.parse_time(body.get("lastUpdatedTime"))
        self.metadata = body.get("metadata") or {}
        self.labels = list(body.get("labels") or [])
        self.username = body.get("username") or ""
        self.workspace_id = body.get("workspaceId")
        self.archived = bool(body.get("archived"))

    @classmethod
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> Model:
        model = cls(session, str(body["name"]))
        model._hydrate(body)
        return model

    def reload(self) -> None:
        self._hydrate(_routes.get_model(self._session, self.name))

    def get_version(self, version: int = -1) -> ModelVersion | None:
        """Version ``version``, or the newest (-1; None when the model has none)."""
        if version == -1:
            params = {"limit": 1, "sortBy": "SORT_BY_VERSION", "orderBy": OrderBy.DESC.value}
            resp = _routes.list_model_versions_response(self._session, self.name, params)
            versions = resp.get("modelVersions") or []
            return ModelVersion._from_json(versions[0], self._session) if versions else None
        body = _routes.get_model_version(self._session, self.name, version)
        return ModelVersion._from_json(body, self._session)

    def list_versions(self, order_by: OrderBy = OrderBy.DESC) -> list[ModelVersion]:
        """Every version, by version number (newest first by default)."""

        def page(offset: int) -> dict[str, Any]:
            query = {"orderBy": order_by.value, "offset": offset}
            return _routes.list_model_versions_response(self._session, self.name, query)

        found = _paging.read_paginated(page, "modelVersions")
        return [ModelVersion._from_json(v, self._session) for v in found]

    def get_versions(self, order_by: OrderBy = OrderBy.DESC) -> list[ModelVersion]:
        """Deprecated in 0.37: :meth:`list_versions`."""
        return self.list_versions(order_by)

    def register_version(self, checkpoint_uuid: str) -> ModelVersion:
        """Register the checkpoint as the model's next version."""
        body = {"checkpointUuid": checkpoint_uuid, "modelName": self.name}
        resp = _routes.post_model_version_response(self._session, self.name, body)
        return ModelVersion._from_json(resp["modelVersion"], self._session)

    def _patch(self, **fields: Any) -> None:
        _routes.patch_model(self._session, self.name, fields)

    def add_metadata(self, metadata: dict[str, Any]) -> None:
        updated = {**(self.metadata or {}), **metadata}
        self._patch(metadata=updated)
        self.metadata = updated

    def remove_metadata(self, keys: list[str]) -> None:
        """Raises ValueError when ``keys`` is not a list of strings."""
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"remove_metadata() takes a list of strings, not {keys!r}")
        updated = {k: v for k, v in (self.metadata or {}).items() if k not in keys}
        self._patch(metadata=updated)
        self.metadata = updated

    def move_to_workspace(self, workspace_name: str) -> None:
        self._patch(workspaceName=workspace_name)

    def set_labels(self, labels: list[str]) -> None:
        """Raises ValueError when ``labels`` is not a list of strings."""
        if isinstance(labels, str) or not all(isinstance(x, str) for x in labels):
            raise ValueError(f"set_labels() takes a list of strings, not {labels!r}")
        self._patch(labels=list(labels))
        self.labels = list(labels)

    def set_description(self, description: str) -> None:
        self._patch(description=description)
        self.description = description

    def archive(self) -> None:
        _routes.model_action(self._session, self.name, "archive")
        self.archived = True

    def unarchive(self) -> None:
        _routes.model_action(self._session, self.name, "unarchive")
        self.archived = False

    def delete(self) -> None:
        _routes.delete_model(self._session, self.name)

    def __repr__(self) -> str:
        return f"Model(id={self.model_id}, name={self.name}, metadata={json.dumps(self.metadata)})"
