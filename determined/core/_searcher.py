"""Searcher operations: what the hyperparameter search asks a trial to train for next.

One ``SearcherContext`` serves both backends. The part that differs (where operations come from
and where reports go) is an ``_OpSource``: the master's searcher endpoints on a cluster, or a
single operation of length 1 when running locally, as the reference's dummy does.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator
from typing import Any, Protocol

from determined.common.api import Session, _routes

logger = logging.getLogger("determined.core")


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    """How ``SearcherContext.operations()`` must be called across ranks.

    ``WorkersAskChief`` (default): every rank iterates in step; the chief fetches each operation
    and broadcasts its length. ``ChiefOnly``: only the chief iterates. The value of ``ChiefOnly``
    keeps the reference's spelling, ``"CHEIF_ONLY"``, so stored configs and logs match.
    """

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHEIF_ONLY"


_UNIT_KEYS = {"records": Unit.RECORDS, "epochs": Unit.EPOCHS, "batches": Unit.BATCHES}


def _parse_searcher_units(experiment_config: dict[str, Any]) -> Unit | None:
    """The unit of ``searcher.max_length``: ``searcher.unit``, else the single key of the
    ``max_length`` dict; a bare integer length has no unit (None)."""
    searcher = experiment_config.get("searcher") or {}
    if "unit" in searcher:
        return _UNIT_KEYS.get(str(searcher["unit"]).lower())
    length = searcher.get("max_length")
    if isinstance(length, dict) and len(length) == 1:
        return _UNIT_KEYS.get(next(iter(length)))
    return None


def _has_searcher_length(experiment_config: dict[str, Any]) -> bool:
    """Whether the search hands out operations: ``searcher.max_length``, the 0.38 pair
    ``time_metric`` + ``max_time`` (operations of ``max_time``), or a custom search. Without
    any of them (0.38 style) the trial decides its own length."""
    searcher = experiment_config.get("searcher") or {}
    if searcher.get("name") == "custom":
        return True  # a custom search's runner sends ValidateAfter lengths
    return searcher.get("max_length") is not None or searcher.get("max_time") is not None


class _OpSource(Protocol):
    """Where operations come from and where their reports go (chief only)."""

    def next_length(self) -> int | None: ...

    def report_progress(self, length: float) -> None: ...

    def report_completed(self, length: int, searcher_metric: Any) -> None: ...

    def acknowledge_out_of_ops(self) -> None: ...


class _MasterOps:
    """Operations from the master's 0.37 searcher endpoints."""

    def __init__(self, session: Session, trial_id: int, allocation_id: str) -> None:
        self._session = session
        self._trial_id = trial_id
        self._allocation_id = allocation_id

    def next_length(self) -> int | None:
        body = _routes.get_searcher_operation(self._session, self._trial_id)
        if body.get("completed"):
            return None
        # The gateway encodes uint64 lengths as strings.
        return int(body["op"]["validateAfter"]["length"])

    def report_progress(self, length: float) -> None:
        _routes.report_trial_progress(self._session, self._trial_id, {"progress": length})

    def report_completed(self, length: int, searcher_metric: Any) -> None:
        body = {"op": {"length": length}, "searcherMetric": searcher_metric}
        _routes.complete_searcher_operation(self._session, self._trial_id, body)

    def acknowledge_out_of_ops(self) -> None:
        _routes.ack_preemption(self._session, self._allocation_id)


class _LocalOps:
    """One operation of a fixed length, reports logged: what a script sees without a master."""

    def __init__(self, length: int = 1) -> None:
        self._remaining = [length]

    def next_length(self) -> int | None:
        return self._remaining.pop() if self._remaining else None

    def report_progress(self, length: float) -> None:
        logger.info(f"searcher progress: {length}")

    def report_completed(self, length: int, searcher_metric: Any) -> None:
        logger.info(f"searcher operation of length {length} completed: metric={searcher_metric}")

    def acknowledge_out_of_ops(self) -> None:
        pass


class SearcherOperation:
    """One train-validate-report cycle requested by the search.

    ``length`` is absolute (total training to reach), not relative to the previous operation.
    Only the chief may report on an operation.
    """

    def __init__(self, source: _OpSource, length: int, is_chief: bool) -> None:
        self._source = source
        self._length = length
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    def report_progress(self, length: float) -> None:
        """Report training progress, in the unit of ``length``. Chief only; after completion
        only ``length == self.length`` is accepted."""
        if not self._is_chief:
            raise RuntimeError("op.report_progress() may only be called on the chief (rank 0)")
        if self._completed and length != self._length:
            raise RuntimeError("op.report_progress() may not be called after op.report_completed()")
        self._source.report_progress(length)

    def report_completed(self, searcher_metric: Any) -> None:
        """Finish the operation with the value of the searcher metric. Chief only, once."""
        if not self._is_chief:
            raise RuntimeError("op.report_completed() may only be called on the chief (rank 0)")
        if self._completed:
            raise RuntimeError("op.report_completed() may only be called once per operation")
        self._completed = True
        self._source.report_completed(self._length, searcher_metric)


class DummySearcherOperation(SearcherOperation):
    """An operation no master assigned (the reference's name): the same rules as
    :class:`SearcherOperation`, and its reports are only logged."""

    def __init__(self, length: int, is_chief: bool) -> None:
        super().__init__(_LocalOps(length), length, is_chief)


class _Broadcaster(Protocol):
    def get_rank(self) -> int: ...

    def broadcast(self, stuff: Any) -> Any: ...


class SearcherContext:
    """Iterate over the operations the hyperparameter search assigns to this trial.

    Example::

        for op in core_context.searcher.operations():
            while trained < op.length:
                ...
            op.report_completed(validate()["loss"])
    """

    def __init__(
        self,
        source: _OpSource,
        dist: _Broadcaster,
        units: Unit | None = None,
        *,
        has_length: bool = True,
    ) -> None:
        self._source = source
        self._dist = dist
        self._units = units
        self._has_length = has_length

    def operations(
        self,
        searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
        auto_ack: bool = True,
    ) -> Iterator[SearcherOperation]:
        """Yield operations until the search has none left for this trial.

        In ``WorkersAskChief`` mode every rank must iterate in step (each step is a broadcast).
        The chief must call ``op.report_completed()`` before asking for the next operation, or
        RuntimeError is raised. With ``auto_ack`` the chief tells the master it is out of work.

        Raises ValueError when the experiment config has no ``searcher.max_length`` (0.38
        style, as Determined 0.38 does): the trial then decides its own length.
        """
        searcher_mode = SearcherMode(searcher_mode)
        if not self._has_length:
            # Acknowledging "out of work" here would make the master run the trial again.
            raise ValueError(
                "this experiment's config has no searcher.max_length, so the search hands out "
                "no operations: train for the length you choose and report "
                "core_context.train.report_progress(fraction_done), or set "
                "searcher.max_length to train by operations"
            )
        if self._dist.get_rank() == 0:
            yield from self._chief_operations(searcher_mode, auto_ack)
            return
        if searcher_mode != SearcherMode.WorkersAskChief:
            raise RuntimeError(
                "searcher.operations(searcher_mode=ChiefOnly) may only be called on the chief; "
                "use SearcherMode.WorkersAskChief to iterate on every rank"
            )
        while True:
            length = self._dist.broadcast(None)
            if length is None:
                return
            yield SearcherOperation(self._source, length, is_chief=False)

    def _chief_operations(
        self, searcher_mode: SearcherMode, auto_ack: bool
    ) -> Iterator[SearcherOperation]:
        while True:
            length = self._source.next_length()
            if searcher_mode == SearcherMode.WorkersAskChief:
                self._dist.broadcast(length)
            if length is None:
                if auto_ack:
                    self._source.acknowledge_out_of_ops()
                return
            op = SearcherOperation(self._source, length, is_chief=True)
            yield op
            if not op._completed:
                raise RuntimeError(
                    "op.report_completed() must be called on each operation before the next one"
                )

    def acknowledge_out_of_ops(self) -> None:
        """Tell the master this trial stops because the search has no more work for it."""
        self._source.acknowledge_out_of_ops()

    def get_configured_units(self) -> Unit | None:
        """The unit of ``searcher.max_length`` in the experiment config (None for a bare int)."""
        return self._units


class DummySearcherContext(SearcherContext):
    """The local searcher: one operation of ``length`` (default 1); units are EPOCHS."""

    def __init__(self, dist: _Broadcaster, length: int = 1) -> None:
        super().__init__(_LocalOps(length), dist, Unit.EPOCHS)
