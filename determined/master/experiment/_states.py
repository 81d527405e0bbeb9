"""The state table of experiments and trials (docs/reference/master.md §4.1–§4.2) and the
allocation exit decision (§4.3), as pure functions of plain values. Nothing here touches the
store; the state values themselves are the store's (``store/_enums.py``)."""

from __future__ import annotations

import dataclasses

from determined.master.store import STOPPING, State

# Where each stopping state ends once nothing runs any more (a kill ends CANCELED).
TERMINAL_OF = {
    State.STOPPING_COMPLETED: State.COMPLETED,
    State.STOPPING_CANCELED: State.CANCELED,
    State.STOPPING_KILLED: State.CANCELED,
    State.STOPPING_ERROR: State.ERROR,
}

_ANY_STOP = STOPPING | {State.ERROR}
TRANSITIONS: dict[State, frozenset[State]] = {
    State.ACTIVE: frozenset({State.PAUSED} | _ANY_STOP),
    State.PAUSED: frozenset({State.ACTIVE} | _ANY_STOP),
    State.STOPPING_COMPLETED: frozenset({State.COMPLETED, State.ERROR}),
    State.STOPPING_CANCELED: frozenset(
        {State.STOPPING_KILLED, State.STOPPING_ERROR, State.CANCELED, State.ERROR}
    ),
    State.STOPPING_KILLED: frozenset({State.CANCELED, State.ERROR}),
    State.STOPPING_ERROR: frozenset({State.ERROR}),
    State.COMPLETED: frozenset(),
    State.CANCELED: frozenset(),
    State.ERROR: frozenset(),
}

# Trial stopping states only escalate: a trial being killed is not merely canceled later.
_SEVERITY = {
    State.STOPPING_COMPLETED: 0,
    State.STOPPING_CANCELED: 1,
    State.STOPPING_KILLED: 2,
    State.STOPPING_ERROR: 3,
}


def can_transition(old: State, new: State) -> bool:
    """Whether ``old -> new`` is legal (same-state requests are the caller's no-op)."""
    return new in TRANSITIONS[old]


def trial_escalation(old: State, new: State) -> State:
    """The state a trial in ``old`` ends up in when asked to move to ``new``: terminal states
    ignore everything, stopping states only move to a more severe stop or their end."""
    if old.is_terminal:
        return old
    if old.is_stopping and new.is_stopping:
        return new if _SEVERITY[new] > _SEVERITY[old] else old
    return new if can_transition(old, new) else old


def terminal_of(state: State) -> State:
    """Where ``state`` ends once nothing runs any more (a terminal state stays)."""
    return TERMINAL_OF.get(state, state)


@dataclasses.dataclass(frozen=True)
class ExitDecision:
    """What a run's exit does to its trial: the trial's state from now on (terminal: the trial
    ends; else it runs again when it has work) and its restart count from now on."""

    state: State
    restarts: int


def decide_exit(
    *,
    state: State,
    exit_code: int,
    killed: bool,
    acked: bool,
    op_complete: bool,
    op_closed: bool,
    restarts: int,
    max_restarts: int,
    dont_retry: bool = False,
    no_node_left: bool = False,
) -> ExitDecision:
    """The allocation exit decision of docs/reference/master.md §4.3; the first rule that
    matches wins.

    Args:
        state: the trial's state when its run exited.
        exit_code: the run's exit code (the first non-zero one of its containers, or 0).
        killed: the master itself killed the run (a kill, the preemption timeout, a master
            restart): rule 3's transient system error, no failure of the trial.
        acked: the run acknowledged a preemption before it exited.
        op_complete, op_closed: the trial's searcher state (§4.2).
        restarts, max_restarts: the trial's restart count so far and the config's limit.
        dont_retry: a ``cancel_retries`` log policy matched one of its lines: a failure is
            final (no restart counted), rule 4's first case.
        no_node_left: ``exclude_node`` log policies excluded every node it could run on: a
            failure is final (0.37's capacity check before the restart).

    Rule 3's unrecoverable errors do not exist in this master.
    """
    failed = exit_code != 0 and not killed
    # 1. A stopping trial ends: in ERROR if its run failed, else where its stop leads.
    if state.is_stopping:
        return ExitDecision(State.ERROR if failed else terminal_of(state), restarts)
    # 2. Its work is done (complete and closed).
    if op_complete and op_closed:
        return ExitDecision(State.ERROR if failed else State.COMPLETED, restarts)
    # 3. Killed by the master: no failure; it runs again when it has work, no restart counted.
    if killed:
        return ExitDecision(state, restarts)
    # 4. A failure counts a restart; past max_restarts the trial ends in ERROR.
    if failed:
        if dont_retry:
            return ExitDecision(State.ERROR, restarts)
        restarts += 1
        final = restarts > max_restarts or no_node_left
        return ExitDecision(State.ERROR if final else state, restarts)
    # 5. Exit 0 without an ack: the user's code chose to stop.
    if not acked:
        return ExitDecision(State.COMPLETED, restarts)
    # 6. Exit 0 with an ack (preempted, or out of operations): runs again when it has work.
    return ExitDecision(state, restarts)
