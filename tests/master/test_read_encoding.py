"""_read_workers.encode: the read workers' JSON is what FastAPI's JSONResponse would write
(compact, UTF-8, NaN and infinities refused), written by pydantic-core."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.master._read_workers import encode

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_bodies = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def _reference(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _same_numbers(a: Any, b: Any) -> bool:
    """Equal JSON values, ints and floats told apart (1 is not 1.0), -0.0 kept."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_numbers(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_numbers(a[k], b[k]) for k in a)
    return bool(a == b)


@given(_bodies)
def test_the_same_json_as_the_json_module_writes(body: Any) -> None:
    written = encode(body)
    assert _same_numbers(json.loads(written), json.loads(_reference(body)))
    # Byte for byte, but for how some floats are spelled (1e-05 and 0.00001).
    if not _has_float(body):
        assert written == _reference(body)


def _has_float(body: Any) -> bool:
    if isinstance(body, float):
        return True
    if isinstance(body, list):
        return any(_has_float(x) for x in body)
    if isinstance(body, dict):
        return any(_has_float(x) for x in body.values())
    return False


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused_as_jsonresponse_refuses_them(bad: float) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        encode({"metrics": {"loss": bad}})


def test_what_neither_can_write_is_refused_as_the_json_module_refuses_it() -> None:
    with pytest.raises(UnicodeEncodeError):
        encode({"name": "\ud800"})  # a lone surrogate


def test_strings_that_name_nan_are_written_as_strings() -> None:
    body = {"note": "NaN", "other": ["Infinity", "-Infinity"]}
    assert encode(body) == _reference(body)


def test_bytes_are_sent_as_they_are() -> None:
    assert encode(b'{"already":"written"}\n') == b'{"already":"written"}\n'
