"""What an event does to an experiment's rows: the search method's operations carried out
(create, validate-after, close, shutdown), trials ended and stopped, the experiment ended when
its last trial is (docs/reference/master.md §4.1–§4.2). Every function works inside one
:class:`~_events.Event`'s transaction."""

from __future__ import annotations

import collections
import logging
from typing import Any

import sqlalchemy as sa

from determined.master import searcher
from determined.master._errors import InvalidArgument
from determined.master.experiment._events import Event, preemption_key, require_trial_of
from determined.master.experiment._states import terminal_of, trial_escalation
from determined.master.store import State, TrialRow, _checkpoints, _time, _trials

logger = logging.getLogger("determined.master")


def apply(event: Event, ops: list[Any]) -> None:
    """Carry out the search's operations, and those they lead to, in order."""
    queue = collections.deque(ops)
    while queue:
        op = queue.popleft()
        if isinstance(op, searcher.Shutdown):
            end = State.STOPPING_COMPLETED
            if op.failure:
                end = State.STOPPING_ERROR
            elif op.cancel:
                end = State.STOPPING_CANCELED
            stop(event, end)
        elif event.state.is_stopping or event.state.is_terminal:
            continue  # a stopping experiment carries out nothing but its shutdown
        elif isinstance(op, searcher.Create):
            queue.extend(_create_trial(event, op))
        elif isinstance(op, searcher.ValidateAfter):
            trial = require_trial_of(event, op.request_id)
            _trials.update_trial(event.conn, trial["id"], op_length=op.length, op_complete=False)
        elif isinstance(op, searcher.Close):
            trial = require_trial_of(event, op.request_id)
            # 0.38 style: a Close is a stop, now (a running trial is preempted)
            stop_now = {"op_complete": True} if event.method.every_validation else {}
            _trials.update_trial(event.conn, trial["id"], op_closed=True, **stop_now)
            queue.extend(finish_if_done(event, trial["id"], apply_ops=False))


def _create_trial(event: Event, op: searcher.Create) -> list[Any]:
    state = State.ACTIVE if event.state == State.ACTIVE else State.PAUSED
    _trials.insert_trial(
        event.conn,
        experiment_id=event.exp["id"],
        request_id=op.request_id,
        hparams=op.hparams,
        seed=op.trial_seed,
        state=state,
        warm_start_checkpoint=op.checkpoint or _warm_start(event),
        # 0.38 style without max_length: no ValidateAfter will come, yet the trial must run;
        # with op_length None it is served {op: null, completed: true} and ends COMPLETED
        # when its process exits 0 unpreempted (_decide_exit)
        has_work=event.method.trials_decide_length,
    )
    return list(event.method.on_trial_created(op.request_id))


def _warm_start(event: Event) -> str | None:
    try:
        return warm_start_of(event.conn, event.exp["config"])
    except InvalidArgument as e:  # deleted since the experiment was created
        logger.warning("experiment %s: no warm start for a new trial: %s", event.exp["id"], e)
        return None


def end_trial(event: Event, trial: TrialRow, end: State) -> None:
    """The trial ends in ``end`` (ERROR, CANCELED, COMPLETED); the search hears of it unless
    the experiment is stopping (an unmanaged one ends with its last trial)."""
    _trials.update_trial(event.conn, trial["id"], state=end, end_time=_time.now())
    if event.state.is_stopping or event.state.is_terminal:
        return
    if event.unmanaged:
        _end_unmanaged_if_done(event)
        return
    rid = trial["request_id"]
    ops: list[Any] = []
    if end == State.ERROR:
        ops += event.method.on_trial_exited_early(rid, searcher.ExitedReason.ERRORED)
    elif end == State.CANCELED:
        ops += event.method.on_trial_exited_early(rid, searcher.ExitedReason.USER_CANCELED)
    ops += event.method.on_trial_closed(rid)
    apply(event, ops)


def finish_if_done(event: Event, trial_id: int, *, apply_ops: bool = True) -> list[Any]:
    """A complete and closed trial stops: gracefully if it runs, at once if not. The search's
    answer is carried out, or returned when not ``apply_ops``."""
    trial = _trials.require_trial(event.conn, trial_id)
    state = State(trial["state"])
    if not (trial["op_complete"] and trial["op_closed"]) or state.is_terminal:
        return []
    if _trials.live_allocation(event.conn, trial_id) is not None:
        _trials.update_trial(
            event.conn, trial_id, state=trial_escalation(state, State.STOPPING_COMPLETED)
        )
        preempt_live(event, trial_id)
        return []
    _trials.update_trial(event.conn, trial_id, state=State.COMPLETED, end_time=_time.now())
    ops = list(event.method.on_trial_closed(trial["request_id"]))
    if apply_ops:
        apply(event, ops)
        return []
    return ops


def stop(event: Event, end: State) -> None:
    """The experiment stops (a STOPPING state): trials without a run end at once, running ones
    are preempted (or killed); it ends when its last trial does."""
    if event.state.is_terminal or event.state == end:
        return
    event.set_state(end)
    for trial in _trials.trials_of(event.conn, event.exp["id"]):
        new = trial_escalation(State(trial["state"]), end)
        if new == State(trial["state"]):
            continue
        if _trials.live_allocation(event.conn, trial["id"]) is None:
            _trials.update_trial(
                event.conn, trial["id"], state=terminal_of(new), end_time=_time.now()
            )
        else:
            _trials.update_trial(event.conn, trial["id"], state=new)
            preempt_live(event, trial["id"])
    maybe_end_experiment(event)


def _end_unmanaged_if_done(event: Event) -> None:
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


def maybe_end_experiment(event: Event) -> None:
    """A stopping experiment without live trials ends."""
    if not event.state.is_stopping:
        return
    trials = _trials.trials_of(event.conn, event.exp["id"])
    if all(State(t["state"]).is_terminal for t in trials):
        event.set_state(terminal_of(event.state))


def preempt_live(event: Event, trial_id: int) -> None:
    """Ask the trial's running allocation (if any, once) to checkpoint and exit."""
    alloc = _trials.live_allocation(event.conn, trial_id)
    if alloc is not None and not alloc["preempted"]:
        _trials.update_allocation(event.conn, alloc["id"], preempted=True)
        event.wake.append(preemption_key(alloc["id"]))


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
