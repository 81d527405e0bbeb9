"""wrap_rank: rank prefixes, rank from the environment, exit codes (docs/reference/harness.md §16;
§19 item 76)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.launch import wrap_rank

pytestmark = pytest.mark.e2e

PY = sys.executable


def run_wrap(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "determined.launch.wrap_rank", *args],
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_prefixes_stdout_and_stderr_lines_and_passes_the_exit_code() -> None:
    script = "import sys; print('a'); print('b', file=sys.stderr); sys.stdout.write('c'); exit(3)"
    out = run_wrap("2", "--", PY, "-c", script)
    assert out.returncode == 3
    assert out.stdout == b"[rank=2] a\n[rank=2] c\n"
    assert out.stderr == b"[rank=2] b\n"


def test_carriage_returns_end_lines_too() -> None:
    buf = io.BytesIO()
    wrap_rank.copy_lines(io.BytesIO(b"10%\r20%\rdone\r\nnext\nlast"), buf, b"[rank=0] ")
    assert buf.getvalue() == (
        b"[rank=0] 10%\n[rank=0] 20%\n[rank=0] done\n[rank=0] next\n[rank=0] last\n"
    )


class _Trickle(io.RawIOBase):
    """A stream that hands out its bytes in the given pieces, as a pipe may."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = list(pieces)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


PIECES = st.sampled_from([b"a", b"bc", b"\r", b"\n", b"\r\n", b"%"])


@given(st.lists(PIECES, max_size=30), st.data())
def test_no_bare_carriage_return_and_the_text_survives(
    parts: list[bytes], data: st.DataObject
) -> None:
    raw = b"".join(parts)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(raw) - 1)), max_size=5)))
    pieces = [raw[i:j] for i, j in zip([0, *cuts], [*cuts, len(raw)], strict=True) if raw[i:j]]
    buf = io.BytesIO()
    wrap_rank.copy_lines(_Trickle(pieces), buf, b"[r] ")  # type: ignore[arg-type]
    out = buf.getvalue()
    assert b"\r" not in out
    lines = out.split(b"\n")[:-1] if out else []
    assert all(line.startswith(b"[r] ") for line in lines)
    # However the bytes were split, the lines are those of the whole text.
    expected = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if expected and not expected.endswith(b"\n"):
        expected += b"\n"
    assert b"".join(line[4:] + b"\n" for line in lines) == expected


def test_a_line_without_end_is_cut_at_max_line() -> None:
    buf = io.BytesIO()
    wrap_rank.copy_lines(io.BytesIO(b"x" * (wrap_rank.MAX_LINE + 5)), buf, b"[r] ")
    assert buf.getvalue() == b"[r] " + b"x" * wrap_rank.MAX_LINE + b"\n[r] xxxxx\n"


def test_rank_from_the_first_set_environment_variable() -> None:
    out = run_wrap("NOPE,MY_RANK", PY, "-c", "print('x')", env={"MY_RANK": "5"})
    assert out.returncode == 0
    assert out.stdout == b"[rank=5] x\n"


def test_no_rank_variable_set_exits_1_with_a_message() -> None:
    out = run_wrap("NOPE_A,NOPE_B", PY, "-c", "print('x')")
    assert out.returncode == 1
    assert b"NOPE_A, NOPE_B" in out.stderr
    assert out.stdout == b""


def test_resolve_rank_prefers_integers() -> None:
    assert wrap_rank.resolve_rank("7", {}) == "7"
    assert wrap_rank.resolve_rank("A,B", {"B": "1"}) == "1"
    with pytest.raises(ValueError):
        wrap_rank.resolve_rank("A", {"A": ""})


def test_a_signal_is_forwarded_and_reported_as_128_plus_n() -> None:
    proc = subprocess.Popen(
        [PY, "-m", "determined.launch.wrap_rank", "0", PY, "-c",
         "import time; print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"[rank=0] up\n"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 20
