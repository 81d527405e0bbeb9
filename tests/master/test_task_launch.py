"""What a non-trial task runs (``resources/_tasks.py``): entrypoints as 0.37 writes them, and
notebooks' ``idle_timeout`` (property-tested parser; bad values name what to write)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.master.resources import _tasks
from determined.master.resources._launcher import LaunchError


def test_entrypoints() -> None:
    assert _tasks.entrypoint_argv(["python3", "x.py"]) == ["python3", "x.py"]
    assert _tasks.entrypoint_argv("echo a; echo b") == ["sh", "-c", "echo a; echo b"]
    # `det cmd run "echo a && echo b"` sends one word: it is a shell line.
    assert _tasks.entrypoint_argv(["echo a && echo b"]) == ["sh", "-c", "echo a && echo b"]
    for bad in (None, "", [], "   ", 3):
        with pytest.raises(LaunchError, match="entrypoint"):
            _tasks.entrypoint_argv(bad)


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["s", "m", "h", ""]))
def test_idle_timeouts(n: int, unit: str) -> None:
    scale = {"s": 1, "m": 60, "h": 3600, "": 1}[unit]
    assert _tasks.idle_seconds(f"{n}{unit}") == n * scale
    assert _tasks.idle_seconds(n) == n


def test_no_or_bad_idle_timeout() -> None:
    assert _tasks.idle_seconds(None) == 0
    assert _tasks.idle_seconds("") == 0
    with pytest.raises(LaunchError, match="like 30m"):
        _tasks.idle_seconds("soon")
