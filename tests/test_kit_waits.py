"""The test kit's waits fail at once, not at their timeout, when the experiment or trial has
settled in a terminal state other than the awaited one, and only then."""

from __future__ import annotations

import time

import pytest
from _kit import trial_cluster
from _kit.trial_cluster import _Settled


@pytest.fixture(autouse=True)
def _short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_cluster, "SETTLED_S", 0.05)


def test_an_unwanted_terminal_state_fails_the_wait_once_it_has_held() -> None:
    settled = _Settled(("STATE_COMPLETED",))
    assert not settled.elsewhere("STATE_ERROR")  # just seen: it may still change
    time.sleep(0.06)
    assert settled.elsewhere("STATE_ERROR")


def test_a_change_of_state_starts_the_clock_again() -> None:
    settled = _Settled(("STATE_ACTIVE",))
    settled.elsewhere("STATE_COMPLETED")
    time.sleep(0.06)
    assert not settled.elsewhere("STATE_CANCELED")
    time.sleep(0.06)
    assert settled.elsewhere("STATE_CANCELED")


@pytest.mark.parametrize(
    ("wanted", "state"),
    [(("STATE_ACTIVE",), "STATE_PAUSED"), (("STATE_ERROR",), "STATE_ERROR")],
)
def test_states_that_are_not_terminal_or_are_awaited_never_fail_early(
    wanted: tuple[str, ...], state: str
) -> None:
    settled = _Settled(wanted)
    settled.elsewhere(state)
    time.sleep(0.06)
    assert not settled.elsewhere(state)
