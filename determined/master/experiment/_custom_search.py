"""The master's half of a custom search (``searcher.name: custom``): the pending searcher
events a runner reads, and the operations it posts back (0.37's ``GetSearcherEvents`` and
``PostSearcherOperations``). Both go through the experiment's event machinery, so the queue,
the trials the operations create and the method's snapshot commit together."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined import errors
from determined.master import searcher
from determined.master._errors import FailedPrecondition, InvalidArgument
from determined.master.experiment import _operations as act
from determined.master.experiment._events import EventRunner
from determined.master.store import State, _experiments


class CustomSearches:
    """Custom searches of :class:`Experiments`, on their event runner."""

    def __init__(self, events: EventRunner) -> None:
        self._events = events

    def searcher_events(self, experiment_id: int) -> tuple[State, list[dict[str, Any]]]:
        """The experiment's state and its pending searcher events, oldest first.

        Raises:
            NotFound, FailedPrecondition: the experiment does not use a custom search.
        """
        with self._events.read() as conn:
            exp = _experiments.require_experiment(conn, experiment_id)
            method = _custom(self._events.method(conn, exp), experiment_id)
            return State(exp["state"]), method.events()

    def post_searcher_operations(
        self,
        experiment_id: int,
        operations: list[Mapping[str, Any]],
        triggered_by: int | None,
    ) -> None:
        """Carry out a runner's operations and acknowledge the event they answer.

        Raises:
            NotFound, FailedPrecondition: not a custom search, or the experiment has ended.
            InvalidArgument: a malformed operation or an event that is not pending (nothing
                changes).
        """
        with self._events.event(experiment_id) as event:
            method = _custom(event.method, experiment_id)
            if event.state.is_terminal:
                raise FailedPrecondition(
                    f"experiment {experiment_id} is {event.state.value}: it takes no more "
                    "searcher operations"
                )
            try:
                ops = method.apply_operations(operations, triggered_by)
            except errors.SearcherEventRejected as e:
                raise InvalidArgument(str(e)) from e
            act.apply(event, ops)


def _custom(method: searcher.SearchMethod, experiment_id: int) -> searcher.CustomSearch:
    if not isinstance(method, searcher.CustomSearch):
        raise FailedPrecondition(
            f"experiment {experiment_id} does not use a custom search (searcher.name: custom); "
            "only those have searcher events and take searcher operations"
        )
    return method
