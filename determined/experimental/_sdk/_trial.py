"""``Trial``: one trial of an experiment, its logs, metrics and checkpoints."""

from __future__ import annotations

import datetime
import inspect
import re
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from determined.common.api import Session
from determined.common.api import _logs as _api_logs
from determined.experimental._sdk import _checkpoint, _metrics, _paging
from determined.experimental._sdk._enums import CheckpointSortBy, LogLevel, OrderBy, TrialState

if TYPE_CHECKING:
    from determined.experimental._sdk._experiment import Experiment

# Experiment lists trials and a trial names its experiment; _experiment sets this when imported
# (so that the two modules do not import each other).
_experiment_class: Any = None
_LEVELS = [level.value for level in LogLevel]
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated (as in Determined 0.37); use {new}", FutureWarning, stacklevel=3
    )


def _as_time(value: str | int | None, name: str) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{name} must be an RFC 3339 string or epoch seconds, not {value!r}")
    if isinstance(value, int):
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    if not _RFC3339.match(value):
        raise ValueError(f"{name} {value!r} is not RFC 3339 (e.g. 2021-10-26T23:17:12Z)")
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


class LogFilter:
    """0.37's ``iter_logs`` filters, applied to each line here (our master's log route takes
    ``follow``, ``head`` and ``tail`` only)."""

    def __init__(
        self,
        *,
        container_ids: list[str] | None = None,
        rank_ids: list[int] | None = None,
        stdtypes: list[str] | None = None,
        min_level: LogLevel | None = None,
        timestamp_before: str | int | None = None,
        timestamp_after: str | int | None = None,
        sources: list[str] | None = None,
        search_text: str | None = None,
    ) -> None:
        self.container_ids = set(container_ids) if container_ids else None
        self.rank_ids = set(rank_ids) if rank_ids else None
        self.stdtypes = set(stdtypes) if stdtypes else None
        self.min_level = _LEVELS.index(min_level.value) if min_level else None
        self.before = _as_time(timestamp_before, "timestamp_before")
        self.after = _as_time(timestamp_after, "timestamp_after")
        self.sources = set(sources) if sources else None
        self.search_text = search_text

    @property
    def empty(self) -> bool:
        return all(
            v is None
            for v in (
                self.container_ids,
                self.rank_ids,
                self.stdtypes,
                self.min_level,
                self.before,
                self.after,
                self.sources,
                self.search_text,
            )
        )

    def keeps(self, entry: dict[str, Any]) -> bool:
        if self.container_ids is not None and entry.get("containerId") not in self.container_ids:
            return False
        if self.rank_ids is not None and entry.get("rankId") not in self.rank_ids:
            return False
        if self.stdtypes is not None and entry.get("stdtype") not in self.stdtypes:
            return False
        if self.sources is not None and entry.get("source") not in self.sources:
            return False
        if self.min_level is not None:
            level = entry.get("level") or "LOG_LEVEL_INFO"
            if level in _LEVELS and _LEVELS.index(level) < self.min_level:
                return False
        if self.before is not None or self.after is not None:
            when = _metrics.parse_time(entry.get("timestamp"))
            if when is not None and self.before is not None and when >= self.before:
                return False
            if when is not None and self.after is not None and when <= self.after:
                return False
        text = str(entry.get("log") or entry.get("message") or "")
        return self.search_text is None or self.search_text in text


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

    def _hydrate(self, body: dict[str, Any]) -> None:
        self.experiment_id = body.get("experimentId")
        self.hparams = body.get("hparams")
        self.state = TrialState(body["state"]) if body.get("state") else None
        self.summary_metrics = body.get("summaryMetrics")

    @classmethod
    def _from_json(cls, body: dict[str, Any], session: Session) -> Trial:
        trial = cls(int(body["id"]), session)
        trial._hydrate(body)
        return trial

    def reload(self) -> None:
        """Read the trial's record again."""
        self._hydrate(self._session.get(f"/api/v1/trials/{self.id}").json()["trial"])

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
        self._session.post(f"/api/v1/trials/{self.id}/kill")

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
        return list_checkpoints(
            self._session, f"/api/v1/trials/{self.id}/checkpoints", sort_by, order_by, max_results
        )

    def top_checkpoint(
        self, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> _checkpoint.Checkpoint:
        """Deprecated in 0.37: ``list_checkpoints(..., max_results=1)[0]``."""
        _deprecated("Trial.top_checkpoint()", "Trial.list_checkpoints(max_results=1)")
        order_by = None
        if sort_by:
            order_by = OrderBy.ASC if smaller_is_better else OrderBy.DESC
        found = self.list_checkpoints(sort_by=sort_by, order_by=order_by, max_results=1)
        if not found:
            raise ValueError(f"trial {self.id} has no checkpoints")
        return found[0]

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
            body = self._session.get(f"/api/v1/checkpoints/{uuid}").json()["checkpoint"]
            return _checkpoint.Checkpoint._from_json(body, self._session)
        by: str | CheckpointSortBy | None = sort_by
        order_by = None
        if latest:
            by, order_by = CheckpointSortBy.BATCH_NUMBER, OrderBy.DESC
        elif sort_by:
            order_by = OrderBy.ASC if smaller_is_better else OrderBy.DESC
        found = self.list_checkpoints(sort_by=by, order_by=order_by, max_results=1)
        if not found:
            raise ValueError(f"trial {self.id} has no checkpoints")
        return found[0]

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
            path = f"/api/v1/trials/{self.id}/checkpoints"
            return dict(self._session.get(path, params={**params, "offset": offset}).json())

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
        assert _experiment_class is not None, "set when _sdk._experiment is imported"
        return _experiment_class._get(self._session, int(self.experiment_id or 0))

    def __repr__(self) -> str:
        return f"Trial(id={self.id})"


def list_checkpoints(
    session: Session,
    path: str,
    sort_by: str | CheckpointSortBy | None,
    order_by: OrderBy | None,
    max_results: int | None,
) -> list[_checkpoint.Checkpoint]:
    """COMPLETED checkpoints listed at ``path`` (a trial's or an experiment's), as 0.37's
    ``list_checkpoints`` of both asks for them."""
    if (sort_by is None) != (order_by is None):
        raise ValueError("set sort_by and order_by together, or neither")
    if sort_by is not None and not isinstance(sort_by, (str, CheckpointSortBy)):
        raise ValueError(f"sort_by must be a CheckpointSortBy or a metric name, not {sort_by!r}")
    params: dict[str, Any] = {"states": ["STATE_COMPLETED"]}
    if isinstance(sort_by, str):
        params["sortByMetric"] = sort_by
    else:
        params["sortByAttr"] = (sort_by or CheckpointSortBy.SEARCHER_METRIC).value
    if order_by is not None:
        params["orderBy"] = order_by.value
    if max_results:
        params["limit"] = max_results

    def page(offset: int) -> dict[str, Any]:
        return dict(session.get(path, params={**params, "offset": offset}).json())

    found = _paging.read_paginated(page, "checkpoints", single=bool(max_results))
    return [_checkpoint.Checkpoint._from_json(c, session) for c in found]
