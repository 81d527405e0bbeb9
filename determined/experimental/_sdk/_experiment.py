"""``Experiment``: one experiment on the master, its lifecycle, trials and checkpoints."""

from __future__ import annotations

import base64
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

from determined.common.api import Session
from determined.experimental._sdk import _checkpoint, _paging, _trial
from determined.experimental._sdk._enums import (
    TERMINAL_STATES,
    CheckpointSortBy,
    ExperimentState,
    OrderBy,
    TrialSortBy,
)


class Experiment:
    """An experiment: get one from ``client.create_experiment``, ``client.get_experiment(id)``
    or ``client.list_experiments()``.

    Attributes (cached; :meth:`reload` refreshes them): ``config``, ``state`` (an
    :class:`ExperimentState`), ``labels`` (a set), ``archived``, ``name``, ``progress``,
    ``description``, ``notes``, ``project_id``, ``workspace_id``.
    """

    def __init__(self, experiment_id: int, session: Session) -> None:
        self._id = experiment_id
        self._session = session
        self.config: dict[str, Any] | None = None
        self.state: ExperimentState | None = None
        self.labels: set[str] | None = None
        self.archived: bool | None = None
        self.name: str | None = None
        self.progress: float | None = None
        self.description: str | None = None
        self.notes: str | None = None
        self.project_id: int | None = None
        self.workspace_id: int | None = None

    @property
    def id(self) -> int:
        return self._id

    def _hydrate(self, body: dict[str, Any]) -> None:
        self.config = body.get("config")
        self.state = ExperimentState(body["state"]) if body.get("state") else None
        self.labels = set(body.get("labels") or [])
        self.archived = body.get("archived")
        self.name = body.get("name")
        self.progress = body.get("progress")
        self.description = body.get("description")
        self.notes = body.get("notes")
        self.project_id = body.get("projectId")
        self.workspace_id = body.get("workspaceId")

    @classmethod
    def _from_json(cls, body: dict[str, Any], session: Session) -> Experiment:
        exp = cls(int(body["id"]), session)
        exp._hydrate(body)
        return exp

    @classmethod
    def _get(cls, session: Session, experiment_id: int) -> Experiment:
        body = session.get(f"/api/v1/experiments/{experiment_id}").json()["experiment"]
        return cls._from_json(body, session)

    def reload(self) -> None:
        """Read the experiment's record again."""
        self._hydrate(self._session.get(f"/api/v1/experiments/{self._id}").json()["experiment"])

    def _patch(self, **fields: Any) -> dict[str, Any]:
        resp = self._session.patch(f"/api/v1/experiments/{self._id}", json=fields).json()
        return dict(resp.get("experiment") or {})

    def set_name(self, name: str) -> None:
        self.name = self._patch(name=name).get("name", name)

    def set_description(self, description: str) -> None:
        self.description = self._patch(description=description).get("description", description)

    def set_notes(self, notes: str) -> None:
        self.notes = self._patch(notes=notes).get("notes", notes)

    def add_label(self, label: str) -> None:
        """Add ``label`` (a no-op when present); ``labels`` becomes the master's set."""
        resp = self._session.put(f"/api/v1/experiments/{self._id}/labels/{label}").json()
        self.labels = set(resp.get("labels") or [])

    def remove_label(self, label: str) -> None:
        """Remove ``label`` (a no-op when absent); ``labels`` becomes the master's set."""
        resp = self._session.delete(f"/api/v1/experiments/{self._id}/labels/{label}").json()
        self.labels = set(resp.get("labels") or [])

    def set_labels(self, labels: set[str]) -> None:
        """Replace the experiment's labels with ``labels``."""
        body = self._patch(labels=sorted(labels))
        self.labels = set(body.get("labels") or [])

    def _post(self, action: str) -> None:
        self._session.post(f"/api/v1/experiments/{self._id}/{action}")

    def activate(self) -> None:
        self._post("activate")

    def pause(self) -> None:
        self._post("pause")

    def cancel(self) -> None:
        """Stop gracefully: trials checkpoint, then stop; the experiment ends CANCELED."""
        self._post("cancel")

    def kill(self) -> None:
        """Stop now: trial processes are killed."""
        self._post("kill")

    def archive(self) -> None:
        self._post("archive")
        self.archived = True

    def unarchive(self) -> None:
        self._post("unarchive")
        self.archived = False

    def delete(self) -> None:
        """Delete the (ended) experiment with its checkpoints and logs."""
        self._session.delete(f"/api/v1/experiments/{self._id}")

    def delete_tensorboard_files(self) -> None:
        self._session.delete(f"/api/v1/experiments/{self._id}/tensorboard-files")

    def download_code(self, output_dir: str | None = None) -> str:
        """Save the model definition the experiment was created with as
        ``exp-<id>_model_def.tar.gz`` in ``output_dir`` (default: the working directory,
        created if missing); return its path."""
        resp = self._session.get(f"/api/v1/experiments/{self._id}/model_def").json()
        name = f"exp-{self._id}_model_def.tar.gz"
        if output_dir:
            out = pathlib.Path(output_dir).expanduser()
            out.mkdir(parents=True, exist_ok=True)
            target = out / name
        else:
            target = pathlib.Path(name)
        target.write_bytes(base64.b64decode(resp["b64Tgz"]))
        return str(target)

    def iter_trials(
        self,
        sort_by: TrialSortBy = TrialSortBy.ID,
        order_by: OrderBy = OrderBy.ASCENDING,
        limit: int | None = None,
    ) -> Iterator[_trial.Trial]:
        """The experiment's trials, ``limit`` per request."""
        params: dict[str, Any] = {"sortBy": sort_by.value, "orderBy": order_by.value}
        if limit:
            params["limit"] = limit

        def page(offset: int) -> dict[str, Any]:
            path = f"/api/v1/experiments/{self._id}/trials"
            return dict(self._session.get(path, params={**params, "offset": offset}).json())

        for body in _paging.read_paginated(page, "trials"):
            yield _trial.Trial._from_json(body, self._session)

    def list_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> list[_trial.Trial]:
        """Every trial of the experiment."""
        return list(self.iter_trials(sort_by, order_by))

    def get_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> list[_trial.Trial]:
        """Deprecated in 0.37: :meth:`list_trials`."""
        _trial._deprecated("Experiment.get_trials()", "Experiment.list_trials()")
        return self.list_trials(sort_by, order_by)

    def await_first_trial(self, interval: float = 0.1) -> _trial.Trial:
        """Wait until the experiment has a trial; return it.

        Raises:
            RuntimeError: the experiment ended without a trial.
        """
        while True:
            self.reload()
            params = {"sortBy": TrialSortBy.START_TIME.value, "orderBy": OrderBy.ASC.value}
            resp = self._session.get(f"/api/v1/experiments/{self._id}/trials", params=params)
            trials = resp.json().get("trials") or []
            if trials:
                return _trial.Trial._from_json(trials[0], self._session)
            if self.state in TERMINAL_STATES:
                raise RuntimeError(
                    f"experiment {self._id} ended ({self.state}) before a trial started"
                )
            time.sleep(interval)

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Poll every ``interval`` seconds until the experiment ends; return its state.

        Raises:
            ValueError: the experiment is PAUSED (it would never end; activate it first).
        """
        waited = 0.0
        while True:
            self.reload()
            if self.state in TERMINAL_STATES:
                assert self.state is not None
                return self.state
            if self.state == ExperimentState.PAUSED:
                raise ValueError(
                    f"experiment {self._id} is paused and would never end; activate() it first"
                )
            time.sleep(interval)
            waited += interval
            if int(waited) // 60 != int(waited - interval) // 60:
                print(
                    f"Waiting for experiment {self._id} to complete: {int(waited) // 60} min",
                    file=sys.stderr,
                )

    def list_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | None = None,
        max_results: int | None = None,
    ) -> list[_checkpoint.Checkpoint]:
        """The experiment's COMPLETED checkpoints, sorted by ``sort_by`` (a validation
        metric's name or a :class:`CheckpointSortBy`; default: the searcher metric, best
        first), at most ``max_results``.

        Raises:
            ValueError: only one of ``sort_by`` and ``order_by`` given, or a bad ``sort_by``.
        """
        path = f"/api/v1/experiments/{self._id}/checkpoints"
        return _trial.list_checkpoints(self._session, path, sort_by, order_by, max_results)

    def top_checkpoint(
        self, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> _checkpoint.Checkpoint:
        """Deprecated in 0.37: ``list_checkpoints(max_results=1)[0]``.

        Raises:
            ValueError: the experiment has no checkpoints.
        """
        _trial._deprecated("Experiment.top_checkpoint()", "list_checkpoints(max_results=1)")
        order_by = None
        if sort_by:
            order_by = OrderBy.ASC if smaller_is_better else OrderBy.DESC
        found = self.list_checkpoints(sort_by=sort_by, order_by=order_by, max_results=1)
        if not found:
            raise ValueError(f"experiment {self._id} has no checkpoints")
        return found[0]

    def top_n_checkpoints(
        self, limit: int, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> list[_checkpoint.Checkpoint]:
        """Deprecated in 0.37: the best checkpoint of each of the ``limit`` best trials.

        Raises:
            ValueError: no checkpoints, or no metric to sort by.
        """
        _trial._deprecated("Experiment.top_n_checkpoints()", "list_checkpoints(max_results=n)")
        found = self.list_checkpoints()
        if not found:
            raise ValueError(f"experiment {self._id} has no checkpoints")
        if not sort_by:
            training = found[0].training
            searcher = (training.experiment_config if training else {}).get("searcher") or {}
            if not isinstance(searcher.get("metric"), str):
                raise ValueError("the experiment config has no searcher.metric; pass sort_by")
            sort_by = searcher["metric"]
            smaller_is_better = searcher.get("smaller_is_better", True)
        return _best_per_trial(found, str(sort_by), bool(smaller_is_better), limit)

    def move_to_project(self, workspace_name: str, project_name: str) -> None:
        """Move the experiment into ``project_name`` of ``workspace_name``."""
        project = find_project(self._session, workspace_name, project_name)
        body = {"experimentId": self._id, "destinationProjectId": int(project["id"])}
        self._session.post(f"/api/v1/experiments/{self._id}/move", json=body)
        self.project_id = int(project["id"])
        self.workspace_id = int(project["workspaceId"])

    def get_pachyderm_config(self) -> dict[str, Any]:
        """The config's ``integrations.pachyderm`` section.

        Raises:
            ValueError: the config has none.
        """
        if self.config is None:
            self.reload()
        section = ((self.config or {}).get("integrations") or {}).get("pachyderm")
        if not section:
            raise ValueError(f"experiment {self._id}'s config has no integrations.pachyderm")
        return dict(section)

    def __repr__(self) -> str:
        return f"Experiment(id={self._id})"


def find_workspace(session: Session, name: str) -> dict[str, Any]:
    """The ``v1Workspace`` named ``name``.

    Raises:
        LookupError: no workspace has that name.
    """
    found = session.get("/api/v1/workspaces", params={"name": name}).json().get("workspaces")
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
    path = f"/api/v1/workspaces/{ws['id']}/projects"
    resp = session.get(path, params={"name": project_name}).json()
    matches = [p for p in resp.get("projects") or [] if p.get("name") == project_name]
    if not matches:
        raise LookupError(f"project {project_name!r} not found in workspace {workspace_name!r}")
    return dict(matches[0])


def _best_per_trial(
    ckpts: list[_checkpoint.Checkpoint], metric: str, smaller_is_better: bool, limit: int
) -> list[_checkpoint.Checkpoint]:
    """The best checkpoint of each trial by ``metric``, best trial first (checkpoints without
    the metric last), at most ``limit``."""

    def value(c: _checkpoint.Checkpoint) -> Any:
        training = c.training
        avg = (training.validation_metrics.get("avgMetrics") if training else None) or {}
        return avg.get(metric)

    present = [c for c in ckpts if value(c) is not None]
    present.sort(key=value, reverse=not smaller_is_better)
    ordered = present + [c for c in ckpts if value(c) is None]
    seen: set[int] = set()
    best: list[_checkpoint.Checkpoint] = []
    for c in ordered:
        trial_id = c.training.trial_id if c.training else -1
        if trial_id not in seen:
            seen.add(trial_id)
            best.append(c)
    return best[:limit]


_trial._experiment_class = Experiment
