"""The experiment lifecycle: create, pause and activate, cancel and kill, continue; and the
event machinery every change of an experiment goes through (docs/reference/master.md §1,
§4.1–§4.2, §4.4).

An experiment's search method lives in memory while the experiment does; every event is one
store transaction (:meth:`Lifecycle._event`): the rows it changes and the method's new
snapshot commit together, so a restarted master continues the same search. If the
transaction fails the in-memory method is dropped and rebuilt from the last snapshot. The
operations a method returns are carried out by :meth:`Lifecycle._apply`.
"""

from __future__ import annotations

import collections
import logging
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
from determined.master.experiment._states import terminal_of, trial_escalation
from determined.master.store import (
    ExperimentRow,
    State,
    Store,
    TrialRow,
    _checkpoints,
    _experiments,
    _time,
    _trials,
    _unmanaged,
)

logger = logging.getLogger("determined.master")


def preemption_key(allocation_id: str) -> str:
    return f"preempt:{allocation_id}"


def searcher_events_key(experiment_id: int) -> str:
    """Notified after every event of the experiment: its custom searcher events or its state
    may have changed (the long poll of ``GET .../searcher_events``)."""
    return f"searcher-events:{experiment_id}"


StateHook = Callable[[sa.Connection, ExperimentRow], None]


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
        self.method = method
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
        for hook in self.state_hooks:
            hook(self.conn, self.exp)


class Lifecycle:
    """The lifecycle of the master's experiments and the event machinery (the base of
    :class:`Experiments`). Thread-safe: events of one experiment run one at a time."""

    def __init__(self, store: Store, signals: Signals) -> None:
        self._store = store
        self._signals = signals
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

    def create(
        self,
        typed: expconf.ExperimentConfig,
        original_config: str,
        *,
        owner_id: int,
        model_definition: bytes | None = None,
        activate: bool = True,
        project_id: int = 1,
    ) -> int:
        """Store a new experiment (PAUSED, its trials created) in project ``project_id`` and
        activate it unless asked not to. Its config is stored as JSON (what the API and trials
        read). Raises InvalidArgument for a searcher section that cannot run."""
        config = typed.to_json_dict()
        seed = typed.reproducibility.experiment_seed
        try:
            method = searcher.make_search_method(
                config["searcher"], config.get("hyperparameters"), seed
            )
        except errors.InvalidSearcherConfig as e:
            raise InvalidArgument(str(e)) from e
        with self._lock, self._store.tx() as conn:
            exp_id = _experiments.insert_experiment(
                conn,
                config=config,
                original_config=original_config,
                model_definition=model_definition,
                owner_id=owner_id,
                project_id=project_id,
            )
            warm_start_of(conn, config)  # a source that does not exist: nothing is created
            event = Event(
                conn, _experiments.require_experiment(conn, exp_id), method, self._state_hooks
            )
            self._apply(event, method.initial_operations())
            self._save(event)
            self._methods[exp_id] = method
        if activate:
            self.set_state(exp_id, State.ACTIVE)
        return exp_id

    def set_state(self, experiment_id: int, state: State) -> None:
        """Pause or activate an experiment and its live trials (same state: no-op).

        Raises:
            NotFound, FailedPrecondition: terminal or incompatible state.
        """
        with self._event(experiment_id) as event:
            if event.state == state:
                return
            if event.state.is_terminal:
                raise FailedPrecondition(f"experiment {experiment_id} is in terminal state")
            if state not in (State.ACTIVE, State.PAUSED) or event.state.is_stopping:
                raise FailedPrecondition(
                    f"experiment {experiment_id} in incompatible state {event.state.value}"
                )
            event.set_state(state)
            for trial in _trials.trials_of(event.conn, experiment_id):
                if State(trial["state"]) in (State.ACTIVE, State.PAUSED):
                    _trials.update_trial(event.conn, trial["id"], state=state)
                    if state == State.PAUSED:
                        self._preempt_live(event, trial["id"])

    def stop(self, experiment_id: int, stop: State) -> None:
        """Cancel (``STOPPING_CANCELED``: running trials are preempted) or kill
        (``STOPPING_KILLED``: the resource manager kills their processes) an experiment.
        Terminal or already-stopping experiments are a no-op, except that a kill upgrades a
        cancel (docs/reference/master.md §4.1)."""
        if stop not in (State.STOPPING_CANCELED, State.STOPPING_KILLED):
            raise InvalidArgument(f"{stop.value} is not a cancel or a kill")
        with self._event(experiment_id) as event:
            upgrade = event.state == State.STOPPING_CANCELED and stop == State.STOPPING_KILLED
            if event.state.is_terminal or (event.state.is_stopping and not upgrade):
                return
            self._stop(event, stop)

    def kill_trial(self, trial_id: int) -> None:
        """Kill one trial: its process is killed and it ends CANCELED; the search sees a
        user cancel (random does not replace it). A terminal trial is a no-op."""
        with self._trial_event(trial_id) as (event, trial):
            state = State(trial["state"])
            if state.is_terminal:
                return
            if _trials.live_allocation(event.conn, trial_id) is not None:
                new = trial_escalation(state, State.STOPPING_KILLED)
                _trials.update_trial(event.conn, trial_id, state=new)
                return
            self._end_trial(event, trial, State.CANCELED)
            self._maybe_end_experiment(event)

    def continue_trial(
        self,
        experiment_id: int,
        check: Callable[[ExperimentRow, list[TrialRow]], dict[str, Any]],
    ) -> None:
        """``det e continue``: an ended experiment trains again. ``check(experiment, trials)``
        returns the config to run under (it raises a 4xx for a request it refuses).

        A single-trial experiment runs its trial to the config's ``max_length``, with the
        config's hyperparameters (those that changed are drawn again, seeded by the trial).
        A grid or random search runs each trial that did not complete (errored, canceled,
        killed) again to its length; as in 0.37, one whose trials all completed is refused.
        Each trial resumes from its latest checkpoint as any new run does, under a new task
        (``<previous task id>-<n>``, as 0.37), and its restart count starts over; the
        experiment is ACTIVE until they end."""
        with self._event(experiment_id) as event:
            if isinstance(event.method, searcher.CustomSearch):
                raise FailedPrecondition(
                    f"experiment {experiment_id} uses a custom search, which cannot be "
                    "continued: run the search runner again to start a new experiment"
                )
            if event.unmanaged:
                raise FailedPrecondition(
                    f"experiment {experiment_id} is unmanaged: the master does not run it; "
                    "rerun its script with the same external ids to continue it"
                )
            trials = _trials.trials_of(event.conn, experiment_id)
            name = (event.exp["config"].get("searcher") or {}).get("name")
            single = name == "single"
            if single and len(trials) != 1:
                raise FailedPrecondition(
                    f"experiment {experiment_id} has {len(trials)} trials; a single-searcher "
                    "experiment continues its one trial"
                )
            live = [t for t in trials if not State(t["state"]).is_terminal]
            if not event.state.is_terminal or (single and live):
                raise FailedPrecondition(
                    f"experiment in non terminal state '{event.state.value}', try again later "
                    "(continue it once it has ended, or pause and activate it instead)"
                )
            config = check(event.exp, trials)
            again = trials if single else [t for t in trials if t["state"] != State.COMPLETED.value]
            if not again:
                raise FailedPrecondition(
                    "experiment has been completed, cannot continue this experiment: all of "
                    f"its {len(trials)} trials completed (create a new experiment to search more)"
                )
            length = searcher.max_length_units(config["searcher"])
            # The search as it was, under the new config (a longer max_length counts in
            # progress), with the chosen trials live again.
            event.method = searcher.restore_search_method(
                config["searcher"], config.get("hyperparameters"), event.method.snapshot()
            )
            old_hps = event.exp["config"].get("hyperparameters") or {}
            for trial in again:
                event.method.reopen(trial["request_id"], length)
                hparams = _redrawn_hparams(trial, old_hps, config.get("hyperparameters") or {})
                # A new task per continue, named as 0.37 names it (``<previous>-<n>``): its
                # runs, logs and log policies start afresh; the trial's logs span them all.
                n = len(_trials.task_ids_of(event.conn, trial))
                _trials.update_trial(
                    event.conn,
                    trial["id"],
                    task_id=f"{trial['task_id']}-{n}",
                    state=State.ACTIVE,
                    end_time=None,
                    restarts=0,
                    early_exit=None,
                    op_length=length,
                    op_complete=False,
                    op_closed=True,  # the search's Close stands: one operation, then done
                    hparams=hparams,
                )
            self._methods[experiment_id] = event.method
            event.exp["state"] = State.ACTIVE.value
            event.exp["end_time"] = None
            event.exp["config"] = config
            _experiments.update_experiment(
                event.conn, experiment_id, state=State.ACTIVE, end_time=None, config=config
            )

    # ----------------------------------------------------------------------- event machinery

    def _end_trial(self, event: Event, trial: TrialRow, end: State) -> None:
        _trials.update_trial(event.conn, trial["id"], state=end, end_time=_time.now())
        if event.state.is_stopping or event.state.is_terminal:
            return
        if event.unmanaged:
            self._end_unmanaged_if_done(event)
            return
        rid = trial["request_id"]
        ops: list[Any] = []
        if end == State.ERROR:
            ops += event.method.on_trial_exited_early(rid, searcher.ExitedReason.ERRORED)
        elif end == State.CANCELED:
            ops += event.method.on_trial_exited_early(rid, searcher.ExitedReason.USER_CANCELED)
        ops += event.method.on_trial_closed(rid)
        self._apply(event, ops)

    def _apply(self, event: Event, ops: list[Any]) -> None:
        queue = collections.deque(ops)
        while queue:
            op = queue.popleft()
            if isinstance(op, searcher.Shutdown):
                stop = State.STOPPING_COMPLETED
                if op.failure:
                    stop = State.STOPPING_ERROR
                elif op.cancel:
                    stop = State.STOPPING_CANCELED
                self._stop(event, stop)
            elif event.state.is_stopping or event.state.is_terminal:
                continue  # a stopping experiment carries out nothing but its shutdown
            elif isinstance(op, searcher.Create):
                queue.extend(self._create_trial(event, op))
            elif isinstance(op, searcher.ValidateAfter):
                trial = self._by_request(event, op.request_id)
                _trials.update_trial(
                    event.conn, trial["id"], op_length=op.length, op_complete=False
                )
            elif isinstance(op, searcher.Close):
                trial = self._by_request(event, op.request_id)
                # 0.38 style: a Close is a stop, now (a running trial is preempted)
                stop_now = {"op_complete": True} if event.method.every_validation else {}
                _trials.update_trial(event.conn, trial["id"], op_closed=True, **stop_now)
                queue.extend(self._finish_if_done(event, trial["id"], apply=False))

    def _create_trial(self, event: Event, op: searcher.Create) -> list[Any]:
        state = State.ACTIVE if event.state == State.ACTIVE else State.PAUSED
        _trials.insert_trial(
            event.conn,
            experiment_id=event.exp["id"],
            request_id=op.request_id,
            hparams=op.hparams,
            seed=op.trial_seed,
            state=state,
            warm_start_checkpoint=op.checkpoint or self._warm_start(event),
            # 0.38 style without max_length: no ValidateAfter will come, yet the trial must run;
            # with op_length None it is served {op: null, completed: true} and ends COMPLETED
            # when its process exits 0 unpreempted (_decide_exit)
            has_work=event.method.trials_decide_length,
        )
        return list(event.method.on_trial_created(op.request_id))

    @staticmethod
    def _warm_start(event: Event) -> str | None:
        try:
            return warm_start_of(event.conn, event.exp["config"])
        except InvalidArgument as e:  # deleted since the experiment was created
            logger.warning("experiment %s: no warm start for a new trial: %s", event.exp["id"], e)
            return None

    def _finish_if_done(self, event: Event, trial_id: int, *, apply: bool = True) -> list[Any]:
        """A complete and closed trial stops: gracefully if it runs, at once if not."""
        trial = _trials.require_trial(event.conn, trial_id)
        state = State(trial["state"])
        if not (trial["op_complete"] and trial["op_closed"]) or state.is_terminal:
            return []
        if _trials.live_allocation(event.conn, trial_id) is not None:
            _trials.update_trial(
                event.conn, trial_id, state=trial_escalation(state, State.STOPPING_COMPLETED)
            )
            self._preempt_live(event, trial_id)
            return []
        _trials.update_trial(event.conn, trial_id, state=State.COMPLETED, end_time=_time.now())
        ops = list(event.method.on_trial_closed(trial["request_id"]))
        if apply:
            self._apply(event, ops)
            return []
        return ops

    def _stop(self, event: Event, stop: State) -> None:
        if event.state.is_terminal or event.state == stop:
            return
        event.set_state(stop)
        for trial in _trials.trials_of(event.conn, event.exp["id"]):
            new = trial_escalation(State(trial["state"]), stop)
            if new == State(trial["state"]):
                continue
            if _trials.live_allocation(event.conn, trial["id"]) is None:
                end = terminal_of(new)
                _trials.update_trial(event.conn, trial["id"], state=end, end_time=_time.now())
            else:
                _trials.update_trial(event.conn, trial["id"], state=new)
                self._preempt_live(event, trial["id"])
        self._maybe_end_experiment(event)

    def _end_unmanaged_if_done(self, event: Event) -> None:
        """An unmanaged experiment ends when its last trial does: ERROR if one errored,
        CANCELED if one was canceled, else COMPLETED. A rerun reopens it."""
        states = {State(t["state"]) for t in _trials.trials_of(event.conn, event.exp["id"])}
        if not states or any(not s.is_terminal for s in states):
            return
        for end in (State.ERROR, State.CANCELED, State.COMPLETED):
            if end in states:
                event.set_state(end)
                return
        event.set_state(State.COMPLETED)

    def _maybe_end_experiment(self, event: Event) -> None:
        if not event.state.is_stopping:
            return
        live = [
            t
            for t in _trials.trials_of(event.conn, event.exp["id"])
            if not State(t["state"]).is_terminal
        ]
        if not live:
            event.set_state(terminal_of(event.state))

    def _preempt_live(self, event: Event, trial_id: int) -> None:
        alloc = _trials.live_allocation(event.conn, trial_id)
        if alloc is not None and not alloc["preempted"]:
            _trials.update_allocation(event.conn, alloc["id"], preempted=True)
            event.wake.append(preemption_key(alloc["id"]))

    def _save(self, event: Event) -> None:
        trials = _trials.trials_of(event.conn, event.exp["id"])
        units = {t["request_id"]: float(t["searcher_units"]) for t in trials}
        values: dict[str, Any] = {}
        if not event.state.is_terminal and not event.unmanaged:
            values["progress"] = event.method.progress(units)
        if values:
            _experiments.update_experiment(event.conn, event.exp["id"], **values)
        _experiments.save_snapshot(event.conn, event.exp["id"], event.method.snapshot())

    def _method(self, conn: sa.Connection, exp: ExperimentRow) -> searcher.SearchMethod:
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

    @contextmanager
    def _event(self, experiment_id: int) -> Iterator[Event]:
        with self._lock:
            try:
                with self._store.tx() as conn:
                    exp = _experiments.require_experiment(conn, experiment_id)
                    event = Event(conn, exp, self._method(conn, exp), self._state_hooks)
                    yield event
                    self._save(event)
            except BaseException:
                self._methods.pop(experiment_id, None)  # rebuilt from the committed snapshot
                raise
        for key in event.wake:
            self._signals.notify(key)
        self._signals.notify(searcher_events_key(experiment_id))
        for callback in self._on_change:
            callback()
        if event.ended:
            for end in self._on_end:
                end(experiment_id)

    @contextmanager
    def _trial_event(self, trial_id: int) -> Iterator[tuple[Event, TrialRow]]:
        with self._store.read() as conn:
            exp_id = _trials.require_trial(conn, trial_id)["experiment_id"]
        with self._event(int(exp_id)) as event:
            yield event, _trials.require_trial(event.conn, trial_id)

    @staticmethod
    def _by_request(event: Event, request_id: str) -> TrialRow:
        trial = _trials.trial_by_request(event.conn, event.exp["id"], request_id)
        if trial is None:
            raise errors.InternalException(f"the search named unknown trial {request_id}")
        return trial


def warm_start_of(conn: sa.Connection, config: dict[str, Any]) -> str | None:
    """The checkpoint new trials start from (docs/reference/master.md §6 item 33):
    ``searcher.source_checkpoint_uuid`` (a COMPLETED checkpoint), else the newest COMPLETED
    checkpoint of ``searcher.source_trial_id``.

    Raises:
        InvalidArgument: the source does not exist or has no usable checkpoint.
    """
    cfg = config.get("searcher") or {}
    uuid, trial_id = cfg.get("source_checkpoint_uuid"), cfg.get("source_trial_id")
    if uuid:
        ckpt = _checkpoints.get(conn, str(uuid))
        if ckpt is None or ckpt["state"] != _checkpoints.COMPLETED:
            why = "does not exist" if ckpt is None else f"is {ckpt['state']}"
            raise InvalidArgument(
                f"searcher.source_checkpoint_uuid: checkpoint {uuid} {why}; name a COMPLETED "
                "checkpoint (det e lc EXP_ID lists them)"
            )
        return str(uuid)
    if trial_id is None:
        return None
    latest = _checkpoints.latest_completed(conn, int(trial_id))
    if latest is None:
        exists = _trials.get_trial(conn, int(trial_id)) is not None
        why = "has no COMPLETED checkpoint" if exists else "does not exist"
        raise InvalidArgument(f"searcher.source_trial_id: trial {trial_id} {why}")
    return str(latest["uuid"])


def _redrawn_hparams(trial: TrialRow, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The trial's hyperparameters under a continue's ``new`` space: those whose definition
    is unchanged keep their value, changed or added ones are drawn from ``new`` (a constant is
    its value) with the trial's seed, removed ones go."""
    changed = {k: v for k, v in new.items() if k not in old or old[k] != v}
    if not changed and set(new) == set(old):
        return dict(trial["hparams"])
    drawn = searcher.sample(
        searcher.parse_hyperparameters(changed), searcher.NpRand(int(trial["seed"]) % 2**32)
    )
    kept = {k: v for k, v in trial["hparams"].items() if k in new and k not in changed}
    return {**kept, **drawn}
