"""Trial events: what a trial's own HTTP calls report (searcher operations, validations,
progress, early exits) and what the resource manager reports (a run allocated, preempted,
exited) (docs/reference/master.md §3.2, §4.2–§4.3)."""

from __future__ import annotations

from typing import Any

from determined import errors
from determined.master import searcher
from determined.master._errors import FailedPrecondition, InvalidArgument, NotFound
from determined.master.experiment import _log_policies as log_policies
from determined.master.experiment import _operations as act
from determined.master.experiment._events import Event, EventRunner, preemption_key
from determined.master.experiment._states import decide_exit
from determined.master.store import (
    AllocationRow,
    AllocationState,
    State,
    TrialRow,
    _experiments,
    _log_policies,
    _logs,
    _time,
    _trials,
    _users,
)

EARLY_EXIT_REASONS = {
    "EXITED_REASON_INVALID_HP": searcher.ExitedReason.INVALID_HP,
    "EXITED_REASON_INIT_INVALID_HP": searcher.ExitedReason.INIT_INVALID_HP,
}


class TrialEvents:
    """The trial events of :class:`Experiments`, each one an event of the trial's experiment
    on their event runner."""

    def __init__(self, events: EventRunner) -> None:
        self._events = events

    def current_operation(self, trial_id: int) -> dict[str, Any]:
        """``GetCurrentTrialSearcherOperationResponse`` of a trial (404: experiment over)."""
        with self._events.store.read() as conn:
            trial = _trials.require_trial(conn, trial_id)
            exp = _experiments.require_experiment(conn, trial["experiment_id"])
        if State(exp["state"]).is_terminal:
            raise NotFound(f"experiment {exp['id']} of trial {trial_id} is not running")
        length = trial["op_length"]
        op = None if length is None else {"validateAfter": {"length": str(length)}}
        return {"op": op, "completed": bool(trial["op_complete"] or length is None)}

    def complete_operation(self, trial_id: int, length: int, metric: Any) -> None:
        """The trial trained to ``length`` and validated; tell the search.

        A length the trial already completed is acknowledged again and changes nothing (a
        retried report whose answer was lost), like a repeated checkpoint report.

        Raises:
            InvalidArgument: ``length`` is neither the trial's pending operation nor one it
                completed (nothing changes).
        """
        with self._events.trial_event(trial_id) as (event, trial):
            if _stopped_by_time_search(event, trial, length):
                return  # 0.38 style: the search already stopped it at this length
            if _already_completed(trial, length):
                return
            if trial["op_complete"] or trial["op_length"] != length:
                pending = None if trial["op_complete"] else trial["op_length"]
                raise InvalidArgument(
                    f"trial {trial_id} has no pending operation of length {length} "
                    f"(pending: {pending}); each operation is completed once"
                )
            _trials.update_trial(event.conn, trial_id, op_complete=True, searcher_units=length)
            trial["op_complete"] = True
            if event.state.is_stopping or event.state.is_terminal:
                return
            try:
                ops = event.method.on_validation_completed(trial["request_id"], metric, length)
            except errors.InvalidSearcherMetric:
                act.stop(event, State.STOPPING_ERROR)
                return
            except errors.SearcherEventRejected as e:
                raise InvalidArgument(str(e)) from e
            act.apply(event, ops)
            if trial["op_closed"]:
                act.finish_if_done(event, trial_id)

    def validation_reported(
        self, trial_id: int, steps_completed: int, metrics: dict[str, Any]
    ) -> None:
        """A trial reported validation metrics. Only 0.38-style (``time_metric``) searches
        judge them: the search gets the searcher metric at the time metric's value (or
        ``steps_completed`` for ``time_metric: batches`` when the trial does not report it)."""
        with self._events.store.read() as conn:
            exp_id = _trials.require_trial(conn, trial_id)["experiment_id"]
            exp = _experiments.require_experiment(conn, exp_id)
        cfg = exp["config"].get("searcher") or {}
        if not cfg.get("time_metric") or cfg.get("metric") not in metrics:
            return
        when = metrics.get(cfg["time_metric"])
        if when is None and cfg["time_metric"] == "batches":
            when = steps_completed
        if isinstance(when, bool) or not isinstance(when, (int, float)):
            return  # no time value on this report: nothing to judge it at
        with self._events.trial_event(trial_id) as (event, trial):
            if (
                event.state.is_stopping
                or event.state.is_terminal
                or event.unmanaged  # its search is never fed: the user's script decides
                or not event.method.every_validation
            ):
                return
            if State(trial["state"]).is_terminal or trial["op_closed"]:
                return
            try:
                ops = event.method.on_validation_completed(
                    trial["request_id"], metrics[cfg["metric"]], int(when)
                )
            except errors.InvalidSearcherMetric:
                act.stop(event, State.STOPPING_ERROR)
                return
            act.apply(event, ops)

    def report_progress(self, trial_id: int, progress: float, *, is_raw: bool) -> None:
        """Units of the current operation (``is_raw`` false) or a raw fraction in [0, 1]."""
        with self._events.trial_event(trial_id) as (event, trial):
            if not is_raw:
                _trials.update_trial(event.conn, trial_id, searcher_units=progress)
                _custom_progress(event, trial, progress)
                return
            # A fraction of the trial's operation, or of the length the trial decides itself
            # (0.38 style, counted in trials): in the search's units, so the experiment's
            # progress adds up over all its trials (see _save).
            length = trial["op_length"]
            units = progress if length is None else progress * float(length)
            _trials.update_trial(event.conn, trial_id, progress=progress, searcher_units=units)
            _custom_progress(event, trial, units)

    def early_exit(self, trial_id: int, reason: str) -> None:
        """An InvalidHP exit, forwarded to the search (it may replace the trial).

        Raises:
            InvalidArgument: an unknown reason, or a second report for the trial.
        """
        why = EARLY_EXIT_REASONS.get(reason)
        if why is None:
            allowed = ", ".join(sorted(EARLY_EXIT_REASONS))
            raise InvalidArgument(f"early exit reason {reason!r} is not one of: {allowed}")
        with self._events.trial_event(trial_id) as (event, trial):
            if trial["early_exit"]:
                raise InvalidArgument(f"trial {trial_id} already reported an early exit")
            # the trial is over: no op left, so an acknowledged exit 0 does not run it again
            _trials.update_trial(
                event.conn, trial_id, early_exit=reason, op_closed=True, op_complete=True
            )
            if not (event.state.is_stopping or event.state.is_terminal or event.unmanaged):
                act.apply(event, event.method.on_trial_exited_early(trial["request_id"], why))

    # ----------------------------------------------------------------------- resource manager

    def allocate(self, trial_id: int, resources: list[dict[str, Any]]) -> tuple[AllocationRow, str]:
        """Start a run of a trial that needs one; returns the allocation row and its token.

        Raises:
            FailedPrecondition: the trial is not ACTIVE, already runs, or has no pending op.
        """
        with self._events.trial_event(trial_id) as (event, trial):
            if State(trial["state"]) != State.ACTIVE or trial["op_complete"]:
                raise FailedPrecondition(
                    f"trial {trial_id} needs no run (state {trial['state']}, "
                    f"pending operation: {not trial['op_complete']})"
                )
            if _trials.live_allocation(event.conn, trial_id) is not None:
                raise FailedPrecondition(f"trial {trial_id} already has a running allocation")
            alloc = _trials.insert_allocation(event.conn, trial_id, resources)
            owner = int(event.exp["owner_id"])
            token = _users.issue_token(
                event.conn, owner, kind="allocation", allocation_id=alloc["id"]
            )
            return alloc, token

    def preempt(self, allocation_id: str) -> None:
        """Ask an allocation's processes to checkpoint and exit (idempotent)."""
        with self._events.store.tx() as conn:
            _trials.require_allocation(conn, allocation_id)
            _trials.update_allocation(conn, allocation_id, preempted=True)
        self._events.signals.notify(preemption_key(allocation_id))

    def allocation_exited(
        self,
        allocation_id: str,
        exit_code: int,
        *,
        killed: bool = False,
        excluded_waits: bool = False,
    ) -> State:
        """The allocation's processes are gone; decide the trial's fate
        (docs/reference/master.md §4.3).

        ``killed``: the master itself killed them (kill, preemption timeout, master restart);
        that is no failure of the trial and counts no restart, like an acknowledged exit.
        ``excluded_waits``: the resource manager keeps a trial off the nodes ``exclude_node``
        log policies excluded (it waits QUEUED for another, as on 0.37's agents); without it
        a failure with excluded nodes is final (as 0.37 on Slurm).
        """
        self._events.signals.drop_barriers(allocation_id)  # nobody else of it will arrive
        with self._events.store.read() as conn:
            trial_id = _trials.require_allocation(conn, allocation_id)["trial_id"]
        with self._events.trial_event(trial_id) as (event, trial):
            alloc = _trials.require_allocation(event.conn, allocation_id)
            if alloc["state"] == AllocationState.TERMINATED.value:
                return State(trial["state"])
            _trials.update_allocation(
                event.conn,
                allocation_id,
                state=AllocationState.TERMINATED,
                exit_code=exit_code,
                end_time=_time.now(),
            )
            _users.revoke_allocation_tokens(event.conn, allocation_id)
            task_id = str(trial["task_id"])
            dont_retry = bool(_log_policies.dont_retry(event.conn, task_id))
            blocked = [] if excluded_waits else _log_policies.blocked_nodes(event.conn, task_id)
            decision = decide_exit(
                state=State(trial["state"]),
                exit_code=exit_code,
                killed=killed,
                acked=bool(alloc["acked"]),
                op_complete=bool(trial["op_complete"]),
                op_closed=bool(trial["op_closed"]),
                restarts=int(trial["restarts"]),
                max_restarts=int(event.exp["config"].get("max_restarts", 5)),
                dont_retry=dont_retry,
                no_node_left=bool(blocked),
            )
            retried_failure = (
                exit_code != 0
                and not killed
                and not State(trial["state"]).is_stopping
                and not (trial["op_complete"] and trial["op_closed"])
            )
            if retried_failure and decision.state == State.ERROR:
                _log_why_not_retried(event, trial, allocation_id, dont_retry, blocked)
            if decision.restarts != int(trial["restarts"]):
                _trials.update_trial(event.conn, trial["id"], restarts=decision.restarts)
            if decision.state.is_terminal:
                act.end_trial(event, trial, decision.state)
            act.maybe_end_experiment(event)
            return decision.state


def _log_why_not_retried(
    event: Event, trial: TrialRow, allocation_id: str, dont_retry: bool, blocked: list[str]
) -> None:
    """The task-log lines that say why a failure was final because of log policies."""
    task_id = str(trial["task_id"])
    like = {"task_id": task_id, "allocation_id": allocation_id, "agent_id": None}
    notes = log_policies.failure_notes(event.conn, task_id, like) if dont_retry else []
    if blocked and not dont_retry:
        text = (
            f"trial cannot run again: log policies excluded node(s) {', '.join(blocked)} and no "
            "other node has its slots"
        )
        notes.append(log_policies.master_line(like, text))
    _logs.append(event.conn, notes)


def _custom_progress(event: Event, trial: TrialRow, units: float) -> None:
    """A custom search hears of a live trial's progress (0.37's ``trialProgress`` event)."""
    live = not (event.state.is_stopping or event.state.is_terminal)
    if live and isinstance(event.method, searcher.CustomSearch):
        event.method.on_trial_progress(trial["request_id"], units)


def _stopped_by_time_search(event: Event, trial: TrialRow, length: int) -> bool:
    return bool(
        event.method.every_validation
        and trial["op_closed"]
        and trial["op_complete"]
        and trial["op_length"] == length
    )


def _already_completed(trial: TrialRow, length: int) -> bool:
    """Whether ``length`` is an operation the trial completed: the last one (still no newer
    pending), or an earlier one it trained past (``searcher_units`` holds at least the last
    completed length, less any raw progress reported since)."""
    if trial["op_complete"]:
        return trial["op_length"] == length
    pending = trial["op_length"]
    return pending is not None and length < pending and length <= trial["searcher_units"]
