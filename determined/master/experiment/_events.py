"""The event runner: every change of an experiment is one event (docs/reference/master.md §1,
§4).

An experiment's search method lives in memory while the experiment does; every event is one
store transaction (:meth:`EventRunner.event`): the rows it changes and the method's new
snapshot commit together, so a restarted master continues the same search. If the
transaction fails the in-memory method is dropped and rebuilt from the last snapshot. What
the method's operations do to the rows is ``_operations``.

The parts of :class:`~_experiments.Experiments` (lifecycle, trial events, bookkeeping, custom
searches, unmanaged experiments) share one runner: its lock orders their events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from determined import errors
from determined.common import expconf
from determined.master import searcher
from determined.master._errors import FailedPrecondition, InvalidArgument
from determined.master._signals import Signals
from determined.master.store import (
    ExperimentRow,
    State,
    Store,
    TrialRow,
    _experiments,
    _time,
    _trials,
    _unmanaged,
)


def preemption_key(allocation_id: str) -> str:
    return f"preempt:{allocation_id}"


def searcher_events_key(experiment_id: int) -> str:
    """Notified after every event of the experiment: its custom searcher events or its state
    may have changed (the long poll of ``GET .../searcher_events``)."""
    return f"searcher-events:{experiment_id}"


StateHook = Callable[[sa.Connection, ExperimentRow], None]


def search_method(typed: expconf.ExperimentConfig) -> searcher.SearchMethod:
    """A new experiment's search method. Raises InvalidArgument for a searcher section that
    cannot run."""
    config = typed.to_json_dict()
    seed = typed.reproducibility.experiment_seed
    try:
        return searcher.make_search_method(config["searcher"], config.get("hyperparameters"), seed)
    except errors.InvalidSearcherConfig as e:
        raise InvalidArgument(str(e)) from e


class Event:
    """One transaction's working set: the experiment row, its method, what to wake after."""

    def __init__(
        self,
        conn: sa.Connection,
        exp: ExperimentRow,
        method: searcher.SearchMethod,
        state_hooks: Sequence[StateHook] = (),
    ) -> None:
        self.conn = conn
        self.exp = exp
        self.method = method  # an event may replace it (continue): the new one is kept
        self.state_hooks = state_hooks
        # Unmanaged (core_v2): the user's process creates the trials and reports their
        # states; the search method only holds the config, it is never asked for operations.
        self.unmanaged = _unmanaged.is_unmanaged(conn, int(exp["id"]))
        self.wake: list[str] = []
        self.ended = False  # the experiment reached a terminal state in this event

    @property
    def state(self) -> State:
        return State(self.exp["state"])

    def set_state(self, state: State) -> None:
        """Store the experiment's new state (a terminal one with its end time)."""
        values: dict[str, Any] = {"state": state}
        self.exp["state"] = state.value
        if state.is_terminal:
            self.exp["end_time"] = values["end_time"] = _time.now()
            if state == State.COMPLETED:
                self.exp["progress"] = values["progress"] = 1.0
            self.ended = True
        _experiments.update_experiment(self.conn, self.exp["id"], **values)
        self.changed()

    def changed(self) -> None:
        """The experiment row's state changed in this event: tell the state hooks."""
        for hook in self.state_hooks:
            hook(self.conn, self.exp)


class EventRunner:
    """Runs the events of the master's experiments, one at a time (its lock), and tells the
    subscribers after each commit. Thread-safe."""

    def __init__(self, store: Store, signals: Signals) -> None:
        self.store = store
        self.signals = signals
        self._methods: dict[int, searcher.SearchMethod] = {}
        self._lock = threading.RLock()
        self._on_change: list[Callable[[], None]] = []
        self._on_end: list[Callable[[int], None]] = []
        self._state_hooks: list[StateHook] = []

    def subscribe(
        self,
        on_change: Callable[[], None] | None = None,
        on_end: Callable[[int], None] | None = None,
    ) -> None:
        """Call ``on_change()`` after every committed event (the resource manager wakes up) and
        ``on_end(experiment_id)`` once an experiment reaches a terminal state (checkpoint GC).
        Callbacks run on the committing thread and must not block."""
        if on_change is not None:
            self._on_change.append(on_change)
        if on_end is not None:
            self._on_end.append(on_end)

    def on_state_change(self, hook: StateHook) -> None:
        """Call ``hook(conn, experiment_row)`` inside the transaction that changes an
        experiment's state, after the change (webhooks queue their events there)."""
        self._state_hooks.append(hook)

    @contextmanager
    def event(self, experiment_id: int) -> Iterator[Event]:
        """One event of the experiment: its row and method in a transaction (under the lock),
        the method's snapshot saved at the end; after the commit, the keys the event named are
        notified and the subscribers told."""
        with self._lock:
            try:
                with self.store.tx() as conn:
                    exp = _experiments.require_experiment(conn, experiment_id)
                    event = Event(conn, exp, self.method(conn, exp), self._state_hooks)
                    yield event
                    self.save(event)
                self._methods[experiment_id] = event.method
            except BaseException:
                self._methods.pop(experiment_id, None)  # rebuilt from the committed snapshot
                raise
        for key in event.wake:
            self.signals.notify(key)
        self.signals.notify(searcher_events_key(experiment_id))
        self.changed()
        if event.ended:
            for end in self._on_end:
                end(experiment_id)

    @contextmanager
    def trial_event(self, trial_id: int) -> Iterator[tuple[Event, TrialRow]]:
        """An event of the trial's experiment, with the trial's row."""
        with self.store.read() as conn:
            exp_id = _trials.require_trial(conn, trial_id)["experiment_id"]
        with self.event(int(exp_id)) as event:
            yield event, _trials.require_trial(event.conn, trial_id)

    @contextmanager
    def new_experiment(self, method: searcher.SearchMethod, **row: Any) -> Iterator[Event]:
        """The first event of a new experiment (``row``: ``_experiments.insert_experiment``'s
        fields), run by ``method`` once it commits. Nobody is told: the caller's next event,
        or :meth:`changed`, does."""
        with self._lock, self.store.tx() as conn:
            exp_id = _experiments.insert_experiment(conn, **row)
            exp = _experiments.require_experiment(conn, exp_id)
            yield Event(conn, exp, method, self._state_hooks)
            self._methods[exp_id] = method

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """A write transaction under the lock, for changes that ask the search nothing."""
        with self._lock, self.store.tx() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A read under the lock: what it reads of the methods no event changes meanwhile."""
        with self._lock, self.store.read() as conn:
            yield conn

    def forget(self, experiment_id: int) -> None:
        """The experiment is gone (deleted): drop its method."""
        with self._lock:
            self._methods.pop(experiment_id, None)

    def changed(self) -> None:
        """Tell the ``on_change`` subscribers."""
        for callback in self._on_change:
            callback()

    def method(self, conn: sa.Connection, exp: ExperimentRow) -> searcher.SearchMethod:
        """The experiment's search method: the live one, else rebuilt from its snapshot."""
        method = self._methods.get(exp["id"])
        if method is None:
            config = exp["config"]
            snapshot = _experiments.load_snapshot(conn, exp["id"])
            if snapshot is None:
                raise FailedPrecondition(f"experiment {exp['id']} has no search state")
            method = searcher.restore_search_method(
                config["searcher"], config.get("hyperparameters"), snapshot
            )
            self._methods[exp["id"]] = method
        return method

    @staticmethod
    def save(event: Event) -> None:
        """The experiment's progress (the search's, over its trials' units) and its method's
        snapshot, in the event's transaction."""
        trials = _trials.trials_of(event.conn, event.exp["id"])
        units = {t["request_id"]: float(t["searcher_units"]) for t in trials}
        if not event.state.is_terminal and not event.unmanaged:
            progress = event.method.progress(units)
            _experiments.update_experiment(event.conn, event.exp["id"], progress=progress)
        _experiments.save_snapshot(event.conn, event.exp["id"], event.method.snapshot())


def require_trial_of(event: Event, request_id: str) -> TrialRow:
    """The trial of the event's experiment the search calls ``request_id``."""
    trial = _trials.trial_by_request(event.conn, event.exp["id"], request_id)
    if trial is None:
        raise errors.InternalException(f"the search named unknown trial {request_id}")
    return trial
