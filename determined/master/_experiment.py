"""Experiments driven by their search methods (spec/master.md §1, §4.1–§4.3).

``Experiments`` holds one search method per live experiment, feeds it trial events and carries
out the operations it returns. Each event is one store transaction: the rows it changes and the
method's new snapshot commit together, so a restarted master continues the same search. If the
transaction fails the in-memory method is dropped and rebuilt from the last snapshot.

Trials are allocated (run) by the resource manager through :meth:`Experiments.allocate` and
reported back through :meth:`Experiments.allocation_exited`; everything else arrives from the
trial's own HTTP calls.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from determined import errors
from determined.master import _config, searcher
from determined.master._errors import FailedPrecondition, InvalidArgument, NotFound
from determined.master._signals import Signals
from determined.master._states import AllocationState, State, trial_escalation
from determined.master._store import Store, _checkpoints, _experiments, _time, _trials, _users
from determined.master.searcher._factory import max_length_units

logger = logging.getLogger("determined.master")

EARLY_EXIT_REASONS = {
    "EXITED_REASON_INVALID_HP": searcher.ExitedReason.INVALID_HP,
    "EXITED_REASON_INIT_INVALID_HP": searcher.ExitedReason.INIT_INVALID_HP,
}


def preemption_key(allocation_id: str) -> str:
    return f"preempt:{allocation_id}"


class _Event:
    """One transaction's working set: the experiment row, its method, what to wake after."""

    def __init__(self, conn: sa.Connection, exp: dict[str, Any], method: Any) -> None:
        self.conn = conn
        self.exp = exp
        self.method = method
        self.wake: list[str] = []
        self.ended = False  # the experiment reached a terminal state in this event

    @property
    def state(self) -> State:
        return State(self.exp["state"])

    def set_state(self, state: State) -> None:
        values: dict[str, Any] = {"state": state}
        if state.is_terminal:
            values["end_time"] = _time.now()
            if state == State.COMPLETED:
                values["progress"] = 1.0
            self.ended = True
        _experiments.update_experiment(self.conn, self.exp["id"], **values)
        self.exp = {**self.exp, **values, "state": state.value}


class Experiments:
    """The master's experiments. Thread-safe: events of one experiment run one at a time."""

    def __init__(self, store: Store, signals: Signals) -> None:
        self._store = store
        self._signals = signals
        self._methods: dict[int, Any] = {}
        self._lock = threading.RLock()
        self._on_change: list[Callable[[], None]] = []
        self._on_end: list[Callable[[int], None]] = []

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

    # ----------------------------------------------------------------------- lifecycle

    def create(
        self,
        config: dict[str, Any],
        original_config: str,
        *,
        owner_id: int,
        model_definition: bytes | None = None,
        activate: bool = True,
    ) -> int:
        """Store a new experiment (PAUSED, its trials created) and activate it unless asked
        not to. Raises InvalidArgument for a searcher section that cannot run."""
        seed = int((config.get("reproducibility") or {}).get("experiment_seed", 0))
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
            )
            warm_start_of(conn, config)  # a source that does not exist: nothing is created
            ev = _Event(conn, _experiments.get_experiment(conn, exp_id) or {}, method)
            self._apply(ev, method.initial_operations())
            self._save(ev)
            self._methods[exp_id] = method
        if activate:
            self.set_state(exp_id, State.ACTIVE)
        return exp_id

    def set_state(self, experiment_id: int, state: State) -> None:
        """Pause or activate an experiment and its live trials (same state: no-op).

        Raises:
            NotFound, FailedPrecondition: terminal or incompatible state.
        """
        with self._event(experiment_id) as ev:
            if ev.state == state:
                return
            if ev.state.is_terminal:
                raise FailedPrecondition(f"experiment {experiment_id} is in terminal state")
            if state not in (State.ACTIVE, State.PAUSED) or ev.state.is_stopping:
                raise FailedPrecondition(
                    f"experiment {experiment_id} in incompatible state {ev.state.value}"
                )
            ev.set_state(state)
            for trial in _trials.trials_of(ev.conn, experiment_id):
                if State(trial["state"]) in (State.ACTIVE, State.PAUSED):
                    _trials.update_trial(ev.conn, trial["id"], state=state)
                    if state == State.PAUSED:
                        self._preempt_live(ev, trial["id"])

    def stop(self, experiment_id: int, stop: State) -> None:
        """Cancel (``STOPPING_CANCELED``: running trials are preempted) or kill
        (``STOPPING_KILLED``: the resource manager kills their processes) an experiment.
        Terminal or already-stopping experiments are a no-op, except that a kill upgrades a
        cancel (spec §4.1)."""
        if stop not in (State.STOPPING_CANCELED, State.STOPPING_KILLED):
            raise InvalidArgument(f"{stop.value} is not a cancel or a kill")
        with self._event(experiment_id) as ev:
            upgrade = ev.state == State.STOPPING_CANCELED and stop == State.STOPPING_KILLED
            if ev.state.is_terminal or (ev.state.is_stopping and not upgrade):
                return
            self._stop(ev, stop)

    def kill_trial(self, trial_id: int) -> None:
        """Kill one trial: its process is killed and it ends CANCELED; the search sees a
        user cancel (random does not replace it). A terminal trial is a no-op."""
        with self._trial_event(trial_id) as (ev, trial):
            state = State(trial["state"])
            if state.is_terminal:
                return
            if _trials.live_allocation(ev.conn, trial_id) is not None:
                new = trial_escalation(state, State.STOPPING_KILLED)
                _trials.update_trial(ev.conn, trial_id, state=new)
                return
            self._end_trial(ev, trial, State.CANCELED)
            self._maybe_end_experiment(ev)

    def continue_trial(
        self, experiment_id: int, check: Callable[[dict[str, Any], dict[str, Any]], Any]
    ) -> None:
        """``det e continue``: the ended single-trial experiment runs its trial again, to the
        ``max_length`` of the config ``check(experiment, trial)`` returns (it raises a 4xx for
        a request it refuses). The trial resumes from its latest checkpoint as any new run
        does; its restart count starts over; the experiment is ACTIVE until the trial ends."""
        with self._event(experiment_id) as ev:
            trials = _trials.trials_of(ev.conn, experiment_id)
            if len(trials) != 1:
                raise FailedPrecondition(
                    f"experiment {experiment_id} has {len(trials)} trials; only a single-trial "
                    "experiment can be continued"
                )
            trial = trials[0]
            if not (ev.state.is_terminal or State(trial["state"]).is_terminal):
                raise FailedPrecondition(
                    f"experiment {experiment_id} is {ev.state.value} and its trial has not "
                    "ended; continue it once it has (or pause and activate it instead)"
                )
            config = check(ev.exp, trial)
            length = max_length_units(config["searcher"])
            rid = trial["request_id"]
            snapshot = _reopened(ev.method.snapshot(), rid, length)
            ev.method = searcher.restore_search_method(
                config["searcher"], config.get("hyperparameters"), snapshot
            )
            self._methods[experiment_id] = ev.method
            _trials.update_trial(
                ev.conn,
                trial["id"],
                state=State.ACTIVE,
                end_time=None,
                restarts=0,
                early_exit=None,
                op_length=length,
                op_complete=False,
                op_closed=True,  # the single search's Close stands: one operation, then done
            )
            values = {"state": State.ACTIVE.value, "end_time": None, "config": config}
            _experiments.update_experiment(ev.conn, experiment_id, **values)
            ev.exp = {**ev.exp, **values}

    # ----------------------------------------------------------------------- bookkeeping

    def set_archived(self, experiment_id: int, archived: bool) -> None:
        """Archive (hide from default listings) or unarchive an ended experiment.

        Raises:
            NotFound, FailedPrecondition: not terminal, or already (un)archived.
        """
        verb = "archive" if archived else "unarchive"
        with self._lock, self._store.tx() as conn:
            exp = self._experiment(conn, experiment_id)
            if bool(exp["archived"]) == archived:
                already = "already archived" if archived else "not archived"
                raise FailedPrecondition(f"Experiment is {already}: experiment {experiment_id}")
            if not State(exp["state"]).is_terminal:
                raise FailedPrecondition(
                    f"Experiment is not in terminal state: experiment {experiment_id} is "
                    f"{exp['state']}; only an ended experiment can be {verb}d "
                    "(wait for it, or cancel or kill it first)"
                )
            _experiments.update_experiment(conn, experiment_id, archived=archived)

    def patch(self, experiment_id: int, values: dict[str, Any]) -> None:
        """Change an experiment's name, description, labels, notes, ``resources`` fields or
        checkpoint GC policy (``checkpoint_storage`` fields), at any state.

        Raises:
            NotFound, InvalidArgument: an empty name.
        """
        with self._lock, self._store.tx() as conn:
            exp = self._experiment(conn, experiment_id)
            config = dict(exp["config"] or {})
            row: dict[str, Any] = {}
            if values.get("name") is not None:
                if not str(values["name"]).strip():
                    raise InvalidArgument("`name` must not be an empty or whitespace string.")
                config["name"] = values["name"]
            for key in ("description", "labels"):
                if values.get(key) is not None:
                    config[key] = values[key]
            for key in ("resources", "checkpoint_storage"):
                if values.get(key):
                    config[key] = {**(config.get(key) or {}), **values[key]}
            if values.get("notes") is not None:
                row["notes"] = values["notes"]
            _experiments.update_experiment(conn, experiment_id, config=config, **row)

    def delete(self, experiment_id: int) -> None:
        """Remove an ended experiment's records (its checkpoint files must be gone already).

        Raises:
            NotFound, FailedPrecondition: not terminal.
        """
        with self._lock, self._store.tx() as conn:
            self.check_deletable(conn, experiment_id)
            _experiments.delete_experiment(conn, experiment_id)
            self._methods.pop(experiment_id, None)

    def check_deletable(self, conn: sa.Connection, experiment_id: int) -> dict[str, Any]:
        """The experiment row if it may be deleted (terminal). Raises NotFound or
        FailedPrecondition."""
        exp = self._experiment(conn, experiment_id)
        if not State(exp["state"]).is_terminal:
            raise FailedPrecondition(
                f"cannot delete experiment {experiment_id} in {exp['state']}: only an ended "
                "experiment can be deleted (cancel or kill it first)"
            )
        return exp

    # ----------------------------------------------------------------------- trial events

    def current_operation(self, trial_id: int) -> dict[str, Any]:
        """``GetCurrentTrialSearcherOperationResponse`` of a trial (404: experiment over)."""
        with self._store.read() as conn:
            trial = self._trial(conn, trial_id)
            exp = _experiments.get_experiment(conn, trial["experiment_id"]) or {}
        if State(exp["state"]).is_terminal:
            raise NotFound(f"experiment {exp['id']} of trial {trial_id} is not running")
        length = trial["op_length"]
        op = None if length is None else {"validateAfter": {"length": str(length)}}
        return {"op": op, "completed": bool(trial["op_complete"] or length is None)}

    def complete_operation(self, trial_id: int, length: int, metric: Any) -> None:
        """The trial trained to ``length`` and validated; tell the search.

        Raises:
            InvalidArgument: ``length`` is not the trial's pending operation, or it was
                already completed (nothing changes).
        """
        with self._trial_event(trial_id) as (ev, trial):
            if _stopped_by_time_search(ev, trial, length):
                return  # 0.38 style: the search already stopped it at this length
            if trial["op_complete"] or trial["op_length"] != length:
                pending = None if trial["op_complete"] else trial["op_length"]
                raise InvalidArgument(
                    f"trial {trial_id} has no pending operation of length {length} "
                    f"(pending: {pending}); each operation is completed once"
                )
            _trials.update_trial(ev.conn, trial_id, op_complete=True, searcher_units=length)
            trial = {**trial, "op_complete": True}
            if ev.state.is_stopping or ev.state.is_terminal:
                return
            try:
                ops = ev.method.on_validation_completed(trial["request_id"], metric, length)
            except errors.InvalidSearcherMetric:
                self._stop(ev, State.STOPPING_ERROR)
                return
            except errors.SearcherEventRejected as e:
                raise InvalidArgument(str(e)) from e
            self._apply(ev, ops)
            if trial["op_closed"]:
                self._finish_if_done(ev, trial_id)

    def validation_reported(
        self, trial_id: int, steps_completed: int, metrics: dict[str, Any]
    ) -> None:
        """A trial reported validation metrics. Only 0.38-style (``time_metric``) searches
        judge them: the search gets the searcher metric at the time metric's value (or
        ``steps_completed`` for ``time_metric: batches`` when the trial does not report it)."""
        with self._store.read() as conn:
            exp_id = self._trial(conn, trial_id)["experiment_id"]
            exp = _experiments.get_experiment(conn, int(exp_id)) or {}
        cfg = (exp.get("config") or {}).get("searcher") or {}
        if not cfg.get("time_metric") or cfg.get("metric") not in metrics:
            return
        when = metrics.get(cfg["time_metric"])
        if when is None and cfg["time_metric"] == "batches":
            when = steps_completed
        if isinstance(when, bool) or not isinstance(when, (int, float)):
            return  # no time value on this report: nothing to judge it at
        with self._trial_event(trial_id) as (ev, trial):
            if ev.state.is_stopping or ev.state.is_terminal or not ev.method.every_validation:
                return
            if State(trial["state"]).is_terminal or trial["op_closed"]:
                return
            try:
                ops = ev.method.on_validation_completed(
                    trial["request_id"], metrics[cfg["metric"]], int(when)
                )
            except errors.InvalidSearcherMetric:
                self._stop(ev, State.STOPPING_ERROR)
                return
            self._apply(ev, ops)

    def report_progress(self, trial_id: int, progress: float, *, is_raw: bool) -> None:
        """Units of the current operation (``is_raw`` false) or a raw fraction in [0, 1]."""
        with self._trial_event(trial_id) as (ev, trial):
            if not is_raw:
                _trials.update_trial(ev.conn, trial_id, searcher_units=progress)
                return
            # A fraction of the trial's operation, or of the length the trial decides itself
            # (0.38 style, counted in trials): in the search's units, so the experiment's
            # progress adds up over all its trials (see _save).
            length = trial["op_length"]
            units = progress if length is None else progress * float(length)
            _trials.update_trial(ev.conn, trial_id, progress=progress, searcher_units=units)

    def early_exit(self, trial_id: int, reason: str) -> None:
        """An InvalidHP exit, forwarded to the search (it may replace the trial).

        Raises:
            InvalidArgument: an unknown reason, or a second report for the trial.
        """
        why = EARLY_EXIT_REASONS.get(reason)
        if why is None:
            allowed = ", ".join(sorted(EARLY_EXIT_REASONS))
            raise InvalidArgument(f"early exit reason {reason!r} is not one of: {allowed}")
        with self._trial_event(trial_id) as (ev, trial):
            if trial["early_exit"]:
                raise InvalidArgument(f"trial {trial_id} already reported an early exit")
            # the trial is over: no op left, so an acknowledged exit 0 does not run it again
            _trials.update_trial(
                ev.conn, trial_id, early_exit=reason, op_closed=True, op_complete=True
            )
            if not (ev.state.is_stopping or ev.state.is_terminal):
                self._apply(ev, ev.method.on_trial_exited_early(trial["request_id"], why))

    # ----------------------------------------------------------------------- resource manager

    def allocate(self, trial_id: int, resources: list[dict[str, Any]]) -> tuple[dict, str]:
        """Start a run of a trial that needs one; returns the allocation row and its token.

        Raises:
            FailedPrecondition: the trial is not ACTIVE, already runs, or has no pending op.
        """
        with self._trial_event(trial_id) as (ev, trial):
            if State(trial["state"]) != State.ACTIVE or trial["op_complete"]:
                raise FailedPrecondition(
                    f"trial {trial_id} needs no run (state {trial['state']}, "
                    f"pending operation: {not trial['op_complete']})"
                )
            if _trials.live_allocation(ev.conn, trial_id) is not None:
                raise FailedPrecondition(f"trial {trial_id} already has a running allocation")
            alloc = _trials.insert_allocation(ev.conn, trial_id, resources)
            owner = int(ev.exp["owner_id"])
            token = _users.issue_token(ev.conn, owner, kind="allocation", allocation_id=alloc["id"])
            return alloc, token

    def preempt(self, allocation_id: str) -> None:
        """Ask an allocation's processes to checkpoint and exit (idempotent)."""
        with self._store.tx() as conn:
            if _trials.get_allocation(conn, allocation_id) is None:
                raise NotFound(f"allocation {allocation_id} not found")
            _trials.update_allocation(conn, allocation_id, preempted=True)
        self._signals.notify(preemption_key(allocation_id))

    def allocation_exited(
        self, allocation_id: str, exit_code: int, *, killed: bool = False
    ) -> State:
        """The allocation's processes are gone; decide the trial's fate (spec §4.3).

        ``killed``: the master itself killed them (kill, preemption timeout, master restart);
        that is no failure of the trial and counts no restart, like an acknowledged exit.
        """
        with self._store.read() as conn:
            alloc = _trials.get_allocation(conn, allocation_id)
        if alloc is None:
            raise NotFound(f"allocation {allocation_id} not found")
        with self._trial_event(int(alloc["trial_id"])) as (ev, trial):
            alloc = _trials.get_allocation(ev.conn, allocation_id) or alloc
            if alloc["state"] == AllocationState.TERMINATED.value:
                return State(trial["state"])
            _trials.update_allocation(
                ev.conn,
                allocation_id,
                state=AllocationState.TERMINATED,
                exit_code=exit_code,
                end_time=_time.now(),
            )
            _users.revoke_allocation_tokens(ev.conn, allocation_id)
            if killed:
                alloc = {**alloc, "acked": True}
            return self._decide_exit(ev, trial, alloc, 0 if killed else exit_code)

    # ----------------------------------------------------------------------- internals

    def _decide_exit(
        self, ev: _Event, trial: dict[str, Any], alloc: dict[str, Any], code: int
    ) -> State:
        state = State(trial["state"])
        failed = code != 0
        if state.is_stopping:
            end = State.ERROR if failed else _terminal_of(state)
        elif trial["op_complete"] and trial["op_closed"]:
            end = State.ERROR if failed else State.COMPLETED
        elif failed:
            restarts = int(trial["restarts"]) + 1
            _trials.update_trial(ev.conn, trial["id"], restarts=restarts)
            limit = int(ev.exp["config"].get("max_restarts", 5))
            end = State.ERROR if restarts > limit else state
        elif not alloc["acked"]:
            end = State.COMPLETED  # exit 0 without ack: the user's code chose to stop
        else:
            end = state  # preempted or out of ops: runs again when it has work
        if end.is_terminal:
            self._end_trial(ev, trial, end)
        self._maybe_end_experiment(ev)
        return end

    def _end_trial(self, ev: _Event, trial: dict[str, Any], end: State) -> None:
        _trials.update_trial(ev.conn, trial["id"], state=end, end_time=_time.now())
        if ev.state.is_stopping or ev.state.is_terminal:
            return
        rid = trial["request_id"]
        ops: list[Any] = []
        if end == State.ERROR:
            ops += ev.method.on_trial_exited_early(rid, searcher.ExitedReason.ERRORED)
        elif end == State.CANCELED:
            ops += ev.method.on_trial_exited_early(rid, searcher.ExitedReason.USER_CANCELED)
        ops += ev.method.on_trial_closed(rid)
        self._apply(ev, ops)

    def _apply(self, ev: _Event, ops: list[Any]) -> None:
        queue = collections.deque(ops)
        while queue:
            op = queue.popleft()
            if isinstance(op, searcher.Shutdown):
                stop = State.STOPPING_COMPLETED
                if op.failure:
                    stop = State.STOPPING_ERROR
                elif op.cancel:
                    stop = State.STOPPING_CANCELED
                self._stop(ev, stop)
            elif ev.state.is_stopping or ev.state.is_terminal:
                continue  # a stopping experiment carries out nothing but its shutdown
            elif isinstance(op, searcher.Create):
                queue.extend(self._create_trial(ev, op))
            elif isinstance(op, searcher.ValidateAfter):
                trial = self._by_request(ev, op.request_id)
                _trials.update_trial(ev.conn, trial["id"], op_length=op.length, op_complete=False)
            elif isinstance(op, searcher.Close):
                trial = self._by_request(ev, op.request_id)
                # 0.38 style: a Close is a stop, now (a running trial is preempted)
                stop_now = {"op_complete": True} if ev.method.every_validation else {}
                _trials.update_trial(ev.conn, trial["id"], op_closed=True, **stop_now)
                queue.extend(self._finish_if_done(ev, trial["id"], apply=False))

    def _create_trial(self, ev: _Event, op: searcher.Create) -> list[Any]:
        state = State.ACTIVE if ev.state == State.ACTIVE else State.PAUSED
        _trials.insert_trial(
            ev.conn,
            experiment_id=ev.exp["id"],
            request_id=op.request_id,
            hparams=op.hparams,
            seed=op.trial_seed,
            state=state,
            warm_start_checkpoint=op.checkpoint or self._warm_start(ev),
            # 0.38 style without max_length: no ValidateAfter will come, yet the trial must run;
            # with op_length None it is served {op: null, completed: true} and ends COMPLETED
            # when its process exits 0 unpreempted (_decide_exit)
            has_work=ev.method.trials_decide_length,
        )
        return list(ev.method.on_trial_created(op.request_id))

    @staticmethod
    def _warm_start(ev: _Event) -> str | None:
        try:
            return warm_start_of(ev.conn, ev.exp["config"])
        except InvalidArgument as e:  # deleted since the experiment was created
            logger.warning("experiment %s: no warm start for a new trial: %s", ev.exp["id"], e)
            return None

    def _finish_if_done(self, ev: _Event, trial_id: int, *, apply: bool = True) -> list[Any]:
        """A complete and closed trial stops: gracefully if it runs, at once if not."""
        trial = _trials.get_trial(ev.conn, trial_id) or {}
        state = State(trial["state"])
        if not (trial["op_complete"] and trial["op_closed"]) or state.is_terminal:
            return []
        if _trials.live_allocation(ev.conn, trial_id) is not None:
            _trials.update_trial(
                ev.conn, trial_id, state=trial_escalation(state, State.STOPPING_COMPLETED)
            )
            self._preempt_live(ev, trial_id)
            return []
        _trials.update_trial(ev.conn, trial_id, state=State.COMPLETED, end_time=_time.now())
        ops = list(ev.method.on_trial_closed(trial["request_id"]))
        if apply:
            self._apply(ev, ops)
            return []
        return ops

    def _stop(self, ev: _Event, stop: State) -> None:
        if ev.state.is_terminal or ev.state == stop:
            return
        ev.set_state(stop)
        for trial in _trials.trials_of(ev.conn, ev.exp["id"]):
            new = trial_escalation(State(trial["state"]), stop)
            if new == State(trial["state"]):
                continue
            if _trials.live_allocation(ev.conn, trial["id"]) is None:
                end = _terminal_of(new)
                _trials.update_trial(ev.conn, trial["id"], state=end, end_time=_time.now())
            else:
                _trials.update_trial(ev.conn, trial["id"], state=new)
                self._preempt_live(ev, trial["id"])
        self._maybe_end_experiment(ev)

    def _maybe_end_experiment(self, ev: _Event) -> None:
        if not ev.state.is_stopping:
            return
        live = [
            t for t in _trials.trials_of(ev.conn, ev.exp["id"]) if not State(t["state"]).is_terminal
        ]
        if not live:
            ev.set_state(_terminal_of(ev.state))

    def _preempt_live(self, ev: _Event, trial_id: int) -> None:
        alloc = _trials.live_allocation(ev.conn, trial_id)
        if alloc is not None and not alloc["preempted"]:
            _trials.update_allocation(ev.conn, alloc["id"], preempted=True)
            ev.wake.append(preemption_key(alloc["id"]))

    def _save(self, ev: _Event) -> None:
        trials = _trials.trials_of(ev.conn, ev.exp["id"])
        units = {t["request_id"]: float(t["searcher_units"]) for t in trials}
        values: dict[str, Any] = {}
        if not ev.state.is_terminal:
            values["progress"] = ev.method.progress(units)
        if values:
            _experiments.update_experiment(ev.conn, ev.exp["id"], **values)
        _experiments.save_snapshot(ev.conn, ev.exp["id"], ev.method.snapshot())

    def _method(self, conn: sa.Connection, exp: dict[str, Any]) -> Any:
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
    def _event(self, experiment_id: int) -> Iterator[_Event]:
        with self._lock:
            try:
                with self._store.tx() as conn:
                    exp = _experiments.get_experiment(conn, experiment_id)
                    if exp is None:
                        raise NotFound(f"experiment {experiment_id} not found")
                    ev = _Event(conn, exp, self._method(conn, exp))
                    yield ev
                    self._save(ev)
            except BaseException:
                self._methods.pop(experiment_id, None)  # rebuilt from the committed snapshot
                raise
        for key in ev.wake:
            self._signals.notify(key)
        for callback in self._on_change:
            callback()
        if ev.ended:
            for end in self._on_end:
                end(experiment_id)

    @contextmanager
    def _trial_event(self, trial_id: int) -> Iterator[tuple[_Event, dict[str, Any]]]:
        with self._store.read() as conn:
            exp_id = self._trial(conn, trial_id)["experiment_id"]
        with self._event(int(exp_id)) as ev:
            yield ev, self._trial(ev.conn, trial_id)

    @staticmethod
    def _experiment(conn: sa.Connection, experiment_id: int) -> dict[str, Any]:
        exp = _experiments.get_experiment(conn, experiment_id)
        if exp is None:
            raise NotFound(f"experiment {experiment_id} not found")
        return exp

    @staticmethod
    def _trial(conn: sa.Connection, trial_id: int) -> dict[str, Any]:
        trial = _trials.get_trial(conn, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        return trial

    @staticmethod
    def _by_request(ev: _Event, request_id: str) -> dict[str, Any]:
        trial = _trials.trial_by_request(ev.conn, ev.exp["id"], request_id)
        if trial is None:
            raise errors.InternalException(f"the search named unknown trial {request_id}")
        return trial


def _terminal_of(state: State) -> State:
    from determined.master._states import TERMINAL_OF

    return state if state.is_terminal else TERMINAL_OF.get(state, state)


def warm_start_of(conn: sa.Connection, config: dict[str, Any]) -> str | None:
    """The checkpoint new trials start from (spec §6 item 33): ``searcher.source_checkpoint_uuid``
    (a COMPLETED checkpoint), else the newest COMPLETED checkpoint of ``searcher.source_trial_id``.

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


def _reopened(snapshot: dict[str, Any], request_id: str, length: int) -> dict[str, Any]:
    """A single search's snapshot with its one trial live again and owing ``ValidateAfter
    (length)``: not closed, not exited, not shut down (``continue_trial``)."""
    return {
        **snapshot,
        "shutdown": False,
        "closed": [r for r in snapshot["closed"] if r != request_id],
        "exits": {r: why for r, why in snapshot["exits"].items() if r != request_id},
        "outstanding": {**snapshot["outstanding"], request_id: [length]},
        "completed": [k for k in snapshot["completed"] if k != f"{request_id}:{length}"],
    }


def _stopped_by_time_search(ev: _Event, trial: dict[str, Any], length: int) -> bool:
    return bool(
        ev.method.every_validation
        and trial["op_closed"]
        and trial["op_complete"]
        and trial["op_length"] == length
    )


def searcher_metric_of(exp: dict[str, Any]) -> tuple[str, bool]:
    return _config.searcher_metric(exp["config"])
