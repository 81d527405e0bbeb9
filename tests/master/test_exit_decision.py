"""determined/master/experiment/_states.py: the allocation exit decision, row by row of
docs/reference/master.md §4.3 "Allocation exit decision (first match wins)", as a pure function
(no master, no store)."""

from __future__ import annotations

import dataclasses

import pytest

from determined.master.experiment import ExitDecision, State, decide_exit

ACTIVE, PAUSED, ERROR, COMPLETED, CANCELED = (
    State.ACTIVE,
    State.PAUSED,
    State.ERROR,
    State.COMPLETED,
    State.CANCELED,
)


@dataclasses.dataclass(frozen=True)
class Exit:
    """One exit: the trial's state and searcher state, the run's end, and the expected
    decision (the trial's next state and restart count)."""

    state: State
    expect: State
    exit_code: int = 0
    killed: bool = False
    acked: bool = True
    op_complete: bool = False
    op_closed: bool = False
    restarts: int = 0
    max_restarts: int = 5
    expect_restarts: int | None = None  # None: unchanged


ROWS = {
    # 1. Trial STOPPING_X: error => ERROR, else X's terminal state (a kill ends CANCELED).
    "1-stopping-completed-exit-0": Exit(State.STOPPING_COMPLETED, COMPLETED),
    "1-stopping-canceled-exit-0": Exit(State.STOPPING_CANCELED, CANCELED),
    "1-stopping-killed-exit-0": Exit(State.STOPPING_KILLED, CANCELED),
    "1-stopping-error-exit-0": Exit(State.STOPPING_ERROR, ERROR),
    "1-stopping-completed-failed": Exit(State.STOPPING_COMPLETED, ERROR, exit_code=1),
    "1-stopping-canceled-failed": Exit(State.STOPPING_CANCELED, ERROR, exit_code=137),
    "1-stopping-killed-by-the-master": Exit(
        State.STOPPING_KILLED, CANCELED, exit_code=-9, killed=True
    ),
    "1-stopping-unacked-exit-0": Exit(State.STOPPING_CANCELED, CANCELED, acked=False),
    # first match wins: a stopping trial's failure counts no restart, even when done
    "1-before-2-and-4": Exit(
        State.STOPPING_COMPLETED, ERROR, exit_code=1, op_complete=True, op_closed=True
    ),
    # 2. complete and closed: error => ERROR, else COMPLETED.
    "2-done-exit-0": Exit(ACTIVE, COMPLETED, op_complete=True, op_closed=True),
    "2-done-unacked-exit-0": Exit(ACTIVE, COMPLETED, acked=False, op_complete=True, op_closed=True),
    "2-done-paused": Exit(PAUSED, COMPLETED, op_complete=True, op_closed=True),
    "2-done-failed-no-restart": Exit(
        ACTIVE, ERROR, exit_code=1, op_complete=True, op_closed=True, restarts=0
    ),
    "2-done-killed-by-the-master": Exit(
        ACTIVE, COMPLETED, exit_code=-9, killed=True, op_complete=True, op_closed=True
    ),
    # 3. Transient system error (the master killed the run): reschedule, no restart count.
    "3-killed-active": Exit(ACTIVE, ACTIVE, exit_code=-9, killed=True, acked=False),
    "3-killed-paused": Exit(PAUSED, PAUSED, exit_code=-15, killed=True),
    "3-killed-at-the-limit": Exit(ACTIVE, ACTIVE, exit_code=1, killed=True, restarts=5),
    # 4. Other failure: restarts+1 (persisted); restarts > max_restarts => ERROR; else
    # reschedule.
    "4-first-failure": Exit(ACTIVE, ACTIVE, exit_code=1, expect_restarts=1),
    "4-failure-unacked": Exit(ACTIVE, ACTIVE, exit_code=2, acked=False, expect_restarts=1),
    "4-last-allowed": Exit(ACTIVE, ACTIVE, exit_code=1, restarts=4, expect_restarts=5),
    "4-one-too-many": Exit(ACTIVE, ERROR, exit_code=1, restarts=5, expect_restarts=6),
    "4-no-restarts-allowed": Exit(ACTIVE, ERROR, exit_code=1, max_restarts=0, expect_restarts=1),
    "4-paused-failure": Exit(PAUSED, PAUSED, exit_code=1, restarts=2, expect_restarts=3),
    "4-complete-not-closed": Exit(ACTIVE, ACTIVE, exit_code=1, op_complete=True, expect_restarts=1),
    # 5. Exit 0 without an ack: the user's code chose to stop => COMPLETED.
    "5-unacked-exit-0": Exit(ACTIVE, COMPLETED, acked=False),
    "5-unacked-exit-0-waiting": Exit(ACTIVE, COMPLETED, acked=False, op_complete=True),
    "5-unacked-exit-0-paused": Exit(PAUSED, COMPLETED, acked=False, restarts=3),
    # 6. Exit 0 with an ack (preempted, out of ops): reschedule (runs again if it has work).
    "6-acked-with-work-left": Exit(ACTIVE, ACTIVE),
    "6-acked-waiting-for-the-search": Exit(ACTIVE, ACTIVE, op_complete=True),
    "6-acked-paused": Exit(PAUSED, PAUSED, restarts=1),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_exit_decision(row: Exit) -> None:
    decision = decide_exit(
        state=row.state,
        exit_code=row.exit_code,
        killed=row.killed,
        acked=row.acked,
        op_complete=row.op_complete,
        op_closed=row.op_closed,
        restarts=row.restarts,
        max_restarts=row.max_restarts,
    )
    restarts = row.restarts if row.expect_restarts is None else row.expect_restarts
    assert decision == ExitDecision(row.expect, restarts)


def test_every_rule_has_rows() -> None:
    assert {name.split("-")[0] for name in ROWS} == {"1", "2", "3", "4", "5", "6"}
