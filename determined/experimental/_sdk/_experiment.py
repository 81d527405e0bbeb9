"""``Experiment`` and ``Trial``: one experiment on the master (its lifecycle, trials and
checkpoints) and one of its trials (logs, metrics, checkpoints). One module: each names the
other (``Experiment.list_trials``, ``Trial.get_experiment``)."""

from __future__ import annotations

import base64
import functools
import inspect
import pathlib
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from determined.common.api import Session, _routes
from determined.common.api import _logs as _api_logs
from determined.experimental._sdk import _checkpoint, _metrics, _paging
from determined.experimental._sdk._enums import (
    TERMINAL_STATES,
    CheckpointSortBy,
    ExperimentState,
    LogLevel,
    OrderBy,
    TrialSortBy,
    TrialState,
)
from determined.experimental._sdk._find import find_project
from determined.experimental._sdk._log_filter import LogFilter


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated (as in Determined 0.37); use {new}", FutureWarning, stacklevel=3
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

    def _hydrate(self, body: Mapping[str, Any]) -> None:
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
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> Experiment:
        exp = cls(int(body["id"]), session)
        exp._hydrate(body)
        return exp

    @classmethod
    def _get(cls, session: Session, experiment_id: int) -> Experiment:
        return cls._from_json(_routes.get_experiment(session, experiment_id), session)

    def reload(self) -> None:
        """Read the experiment's record again."""
        self._hydrate(_routes.get_experiment(self._session, self._id))

    def _patch(self, **fields: Any) -> _routes.Experiment:
        return _routes.patch_experiment(self._session, self._id, fields)

    def set_name(self, name: str) -> None:
        self.name = self._patch(name=name).get("name", name)

    def set_description(self, description: str) -> None:
        self.description = self._patch(description=description).get("description", description)

    def set_notes(self, notes: str) -> None:
        self.notes = self._patch(notes=notes).get("notes", notes)

    def add_label(self, label: str) -> None:
        """Add ``label`` (a no-op when present); ``labels`` becomes the master's set."""
        self.labels = set(_routes.put_experiment_label(self._session, self._id, label))

    def remove_label(self, label: str) -> None:
        """Remove ``label`` (a no-op when absent); ``labels`` becomes the master's set."""
        self.labels = set(_routes.delete_experiment_label(self._session, self._id, label))

    def set_labels(self, labels: set[str]) -> None:
        """Replace the experiment's labels with ``labels``."""
        body = self._patch(labels=sorted(labels))
        self.labels = set(body.get("labels") or [])

    def _post(self, action: _routes.ExperimentAction) -> None:
        _routes.experiment_action(self._session, self._id, action)

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
        _routes.delete_experiment(self._session, self._id)

    def delete_tensorboard_files(self) -> None:
        _routes.delete_tensorboard_files(self._session, self._id)

    def download_code(self, output_dir: str | None = None) -> str:
        """Save the model definition the experiment was created with as
        ``exp-<id>_model_def.tar.gz`` in ``output_dir`` (default: the working directory,
        created if missing); return its path."""
        b64_tgz = _routes.get_model_def(self._session, self._id)
        name = f"exp-{self._id}_model_def.tar.gz"
        if output_dir:
            out = pathlib.Path(output_dir).expanduser()
            out.mkdir(parents=True, exist_ok=True)
            target = out / name
        else:
            target = pathlib.Path(name)
        target.write_bytes(base64.b64decode(b64_tgz))
        return str(target)

    def iter_trials(
        self,
        sort_by: TrialSortBy = TrialSortBy.ID,
        order_by: OrderBy = OrderBy.ASCENDING,
        limit: int | None = None,
    ) -> Iterator[Trial]:
        """The experiment's trials, ``limit`` per request."""

        def page(offset: int) -> dict[str, Any]:
            return _routes.list_experiment_trials(
                self._session,
                self._id,
                sort_by=sort_by.value,
                order_by=order_by.value,
                limit=limit or None,
                offset=offset,
            )

        for body in _paging.read_paginated(page, "trials"):
            yield Trial._from_json(body, self._session)

    def list_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> list[Trial]:
        """Every trial of the experiment."""
        return list(self.iter_trials(sort_by, order_by))

    def get_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> list[Trial]:
        """Deprecated in 0.37: :meth:`list_trials`."""
        _deprecated("Experiment.get_trials()", "Experiment.list_trials()")
        return self.list_trials(sort_by, order_by)

    def await_first_trial(self, interval: float = 0.1) -> Trial:
        """Wait until the experiment has a trial; return it.

        Raises:
            RuntimeError: the experiment ended without a trial.
        """
        while True:
            self.reload()
            trials = _routes.list_experiment_trials(
                self._session,
                self._id,
                sort_by=TrialSortBy.START_TIME.value,
                order_by=OrderBy.ASC.value,
            ).get("trials")
            if trials:
                return Trial._from_json(trials[0], self._session)
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
        page = functools.partial(_routes.list_experiment_checkpoints, self._session, self._id)
        return _checkpoint.list_checkpoints(self._session, page, sort_by, order_by, max_results)

    def top_checkpoint(
        self, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> _checkpoint.Checkpoint:
        """Deprecated in 0.37: ``list_checkpoints(max_results=1)[0]``.

        Raises:
            ValueError: the experiment has no checkpoints.
        """
        _deprecated("Experiment.top_checkpoint()", "list_checkpoints(max_results=1)")
        return _top_checkpoint(
            self.list_checkpoints, f"experiment {self._id}", sort_by, smaller_is_better
        )

    def top_n_checkpoints(
        self, limit: int, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> list[_checkpoint.Checkpoint]:
        """Deprecated in 0.37: the best checkpoint of each of the ``limit`` best trials.

        Raises:
            ValueError: no checkpoints, or no metric to sort by.
        """
        _deprecated("Experiment.top_n_checkpoints()", "list_checkpoints(max_results=n)")
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
        _routes.move_experiment(self._session, self._id, body)
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


class Trial:
    """A trial: get one from ``client.get_trial(id)`` or ``Experiment.list_trials()``.

    Attributes (cached; :meth:`reload` refreshes them):
        id: the trial's id.
        experiment_id: its experiment.
        hparams: its hyperparameter values.
        state: a :class:`TrialState`.
        summary_metrics: per-metric aggregates (``{"avg_metrics": {...}, ...}``).
    """

    def __init__(self, trial_id: int, session: Session) -> None:
        self.id = trial_id
        self._session = session
        self.experiment_id: int | None = None
        self.hparams: dict[str, Any] | None = None
        self.summary_metrics: dict[str, Any] | None = None
        self.state: TrialState | None = None

    def _hydrate(self, body: Mapping[str, Any]) -> None:
        self.experiment_id = body.get("experimentId")
        self.hparams = body.get("hparams")
        self.state = TrialState(body["state"]) if body.get("state") else None
        self.summary_metrics = body.get("summaryMetrics")

    @classmethod
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> Trial:
        trial = cls(int(body["id"]), session)
        trial._hydrate(body)
        return trial

    def reload(self) -> None:
        """Read the trial's record again."""
        self._hydrate(_routes.get_trial(self._session, self.id))

    def iter_logs(
        self,
        follow: bool = False,
        *,
        head: int | None = None,
        tail: int | None = None,
        container_ids: list[str] | None = None,
        rank_ids: list[int] | None = None,
        stdtypes: list[str] | None = None,
        min_level: LogLevel | None = None,
        timestamp_before: str | int | None = None,
        timestamp_after: str | int | None = None,
        sources: list[str] | None = None,
        search_text: str | None = None,
    ) -> Iterator[str]:
        """The trial's log lines (0.37's formatted ``message``), oldest first; ``follow``
        waits for new lines until the trial ends. ``head``/``tail`` keep the first/last N
        lines that pass the filters.

        Raises:
            ValueError: a negative ``head``/``tail``, or a timestamp that is neither RFC 3339
                nor epoch seconds.
        """
        if head is not None and head < 0:
            raise ValueError(f"head must be non-negative, got {head}")
        if tail is not None and tail < 0:
            raise ValueError(f"tail must be non-negative, got {tail}")
        keep = LogFilter(
            container_ids=container_ids,
            rank_ids=rank_ids,
            stdtypes=stdtypes,
            min_level=min_level,
            timestamp_before=timestamp_before,
            timestamp_after=timestamp_after,
            sources=sources,
            search_text=search_text,
        )
        if keep.empty:
            entries = _api_logs.trial_logs(
                self._session, self.id, follow=follow, head=head, tail=tail
            )
            yield from (self._message(e) for e in entries)
            return
        kept = (
            e for e in _api_logs.trial_logs(self._session, self.id, follow=follow) if keep.keeps(e)
        )
        if tail is not None:
            yield from [self._message(e) for e in kept][-tail:] if tail else []
            return
        for n, entry in enumerate(kept):
            if head is not None and n >= head:
                return
            yield self._message(entry)

    @staticmethod
    def _message(entry: dict[str, Any]) -> str:
        return str(entry.get("message") or entry.get("log") or "")

    def logs(self, *args: Any, **kwargs: Any) -> Iterable[str]:
        """Deprecated in 0.37: :meth:`iter_logs`."""
        _deprecated("Trial.logs()", "Trial.iter_logs()")
        return self.iter_logs(*args, **kwargs)

    logs.__signature__ = inspect.signature(iter_logs)  # type: ignore[attr-defined]

    def kill(self) -> None:
        """Stop the trial now."""
        _routes.kill_trial(self._session, self.id)

    def list_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | None = None,
        max_results: int | None = None,
    ) -> list[_checkpoint.Checkpoint]:
        """The trial's checkpoints, sorted by ``sort_by`` (a validation metric's name or a
        :class:`CheckpointSortBy`; default: the searcher metric, best first).

        Raises:
            ValueError: only one of ``sort_by`` and ``order_by`` given, or a bad ``sort_by``.
        """
        page = functools.partial(_routes.list_trial_checkpoints, self._session, self.id)
        return _checkpoint.list_checkpoints(self._session, page, sort_by, order_by, max_results)

    def top_checkpoint(
        self, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> _checkpoint.Checkpoint:
        """Deprecated in 0.37: ``list_checkpoints(..., max_results=1)[0]``."""
        _deprecated("Trial.top_checkpoint()", "Trial.list_checkpoints(max_results=1)")
        return _top_checkpoint(
            self.list_checkpoints, f"trial {self.id}", sort_by, smaller_is_better
        )

    def select_checkpoint(
        self,
        latest: bool = False,
        best: bool = False,
        uuid: str | None = None,
        sort_by: str | None = None,
        smaller_is_better: bool | None = None,
    ) -> _checkpoint.Checkpoint:
        """Deprecated in 0.37: the latest, the best or the named checkpoint of the trial
        (exactly one of ``latest``, ``best``, ``uuid``)."""
        _deprecated("Trial.select_checkpoint()", "Trial.list_checkpoints()")
        if int(latest) + int(best) + int(uuid is not None) != 1:
            raise ValueError("set exactly one of latest, best and uuid")
        if (sort_by is None) != (smaller_is_better is None):
            raise ValueError("set sort_by and smaller_is_better together, or neither")
        if sort_by is not None and not best:
            raise ValueError("sort_by and smaller_is_better go with best=True only")
        if uuid is not None:
            return _checkpoint.Checkpoint._get(self._session, uuid)
        owner = f"trial {self.id}"
        if latest:
            return _first_checkpoint(
                self.list_checkpoints, owner, CheckpointSortBy.BATCH_NUMBER, OrderBy.DESC
            )
        return _top_checkpoint(self.list_checkpoints, owner, sort_by, smaller_is_better)

    def get_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | None = None,
    ) -> list[_checkpoint.Checkpoint]:
        """Deprecated in 0.37: :meth:`list_checkpoints` (here: of every state)."""
        _deprecated("Trial.get_checkpoints()", "Trial.list_checkpoints()")
        if (sort_by is None) != (order_by is None):
            raise ValueError("set sort_by and order_by together, or neither")
        params: dict[str, Any] = {}
        if isinstance(sort_by, str):
            params["sortByMetric"] = sort_by
        elif sort_by is not None:
            params["sortByAttr"] = sort_by.value
        if order_by is not None:
            params["orderBy"] = order_by.value

        def page(offset: int) -> dict[str, Any]:
            return _routes.list_trial_checkpoints(
                self._session, self.id, {**params, "offset": offset}
            )

        found = _paging.read_paginated(page, "checkpoints")
        return [_checkpoint.Checkpoint._from_json(c, self._session) for c in found]

    def iter_metrics(self, group: str) -> Iterator[_metrics.TrialMetrics]:
        """The trial's metric reports of ``group`` (``"training"``, ``"validation"``, or any
        group it reported), oldest first; waits for new ones while the trial runs."""
        return _metrics.trials_metrics(self._session, [self.id], group)

    def stream_metrics(self, group: str) -> Iterator[_metrics.TrialMetrics]:
        """Deprecated in 0.37: :meth:`iter_metrics`."""
        _deprecated("Trial.stream_metrics()", "Trial.iter_metrics()")
        return self.iter_metrics(group)

    def stream_training_metrics(self) -> Iterator[_metrics.TrainingMetrics]:
        """Deprecated in 0.37: ``iter_metrics("training")``."""
        _deprecated("Trial.stream_training_metrics()", 'Trial.iter_metrics("training")')
        return _metrics.training_metrics(self._session, [self.id])

    def stream_validation_metrics(self) -> Iterator[_metrics.ValidationMetrics]:
        """Deprecated in 0.37: ``iter_metrics("validation")``."""
        _deprecated("Trial.stream_validation_metrics()", 'Trial.iter_metrics("validation")')
        return _metrics.validation_metrics(self._session, [self.id])

    def get_experiment(self) -> Experiment:
        """The trial's experiment."""
        if self.experiment_id is None:
            self.reload()
        return Experiment._get(self._session, int(self.experiment_id or 0))

    def __repr__(self) -> str:
        return f"Trial(id={self.id})"


_ListCheckpoints = Callable[..., list[_checkpoint.Checkpoint]]


def _first_checkpoint(
    list_checkpoints: _ListCheckpoints,
    owner: str,
    sort_by: str | CheckpointSortBy | None,
    order_by: OrderBy | None,
) -> _checkpoint.Checkpoint:
    """The first of ``owner``'s checkpoints in that order.

    Raises:
        ValueError: ``owner`` has no checkpoints.
    """
    found = list_checkpoints(sort_by=sort_by, order_by=order_by, max_results=1)
    if not found:
        raise ValueError(f"{owner} has no checkpoints")
    return found[0]


def _top_checkpoint(
    list_checkpoints: _ListCheckpoints,
    owner: str,
    sort_by: str | None,
    smaller_is_better: bool | None,
) -> _checkpoint.Checkpoint:
    """0.37's deprecated ``top_checkpoint`` of an experiment or a trial: the best by
    ``sort_by`` (default: the searcher metric)."""
    order_by = None
    if sort_by:
        order_by = OrderBy.ASC if smaller_is_better else OrderBy.DESC
    return _first_checkpoint(list_checkpoints, owner, sort_by, order_by)


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
