"""``determined.common.check``: assertions that stay on under ``python -O``.

Each ``check.<name>(..., reason=None)`` raises :class:`CheckFailedError` (saying what was found,
what was expected, and ``reason``) when its condition fails; each also has the ``check_<name>``
spelling older code used.
"""

from __future__ import annotations

from collections.abc import Container, Sized
from typing import Any


class CheckFailedError(Exception):
    """A ``determined.common.check`` condition failed."""


def _fail(what: str, reason: str | None) -> None:
    raise CheckFailedError(f"CHECK FAILED! {what}" + (f": {reason}" if reason is not None else ""))


def true(val: bool, reason: str | None = None) -> None:
    if not val:
        _fail(f"Got {val}, expected True", reason)


def false(val: bool, reason: str | None = None) -> None:
    if val:
        _fail(f"Got {val}, expected False", reason)


def is_none(val: Any, reason: str | None = None) -> None:
    if val is not None:
        _fail(f"Got {val}, expected None", reason)


def is_not_none(val: Any, reason: str | None = None) -> None:
    if val is None:
        _fail("Got None, expected not None", reason)


def eq(val: Any, expected: Any, reason: str | None = None) -> None:
    if val != expected:
        _fail(f"Got {val}, expected {expected}", reason)


def not_eq(x: Any, y: Any, reason: str | None = None) -> None:
    if x == y:
        _fail(f"{x} == {y}", reason)


def gt(x: Any, y: Any, reason: str | None = None) -> None:
    if not x > y:
        _fail(f"{x} <= {y}", reason)


def gt_eq(x: Any, y: Any, reason: str | None = None) -> None:
    if not x >= y:
        _fail(f"{x} < {y}", reason)


def lt(x: Any, y: Any, reason: str | None = None) -> None:
    if not x < y:
        _fail(f"{x} >= {y}", reason)


def lt_eq(x: Any, y: Any, reason: str | None = None) -> None:
    if not x <= y:
        _fail(f"{x} > {y}", reason)


def equal_lengths(x: Sized, y: Sized, reason: str | None = None) -> None:
    if len(x) != len(y):
        _fail(f"lengths differ: {len(x)} != {len(y)}", reason)


def len_eq(val: Sized, expected_len: int, reason: str | None = None) -> None:
    if len(val) != expected_len:
        _fail(f"Got length {len(val)}, expected {expected_len}", reason)


def is_in(val: Any, expected: Container[Any], reason: str | None = None) -> None:
    if val not in expected:
        shown = list(expected) if isinstance(expected, dict) else expected
        _fail(f"'{val}' is not in {shown}", reason)


def not_in(val: Any, expected: Container[Any], reason: str | None = None) -> None:
    if val in expected:
        _fail(f"'{val}' is in {expected}", reason)


def is_type(val: Any, expected: type, reason: str | None = None) -> None:
    if type(val) is not expected:
        _fail(f"Got {type(val).__name__}, expected {expected.__name__}", reason)


def is_instance(val: Any, expected: type | tuple[type, ...], reason: str | None = None) -> None:
    if not isinstance(val, expected):
        _fail(f"Got {type(val).__name__}, expected an instance of {expected}", reason)


def is_not_instance(val: Any, expected: type | tuple[type, ...], reason: str | None = None) -> None:
    if isinstance(val, expected):
        _fail(f"Got {type(val).__name__}, expected no instance of {expected}", reason)


def is_subclass(val: Any, expected: type, reason: str | None = None) -> None:
    if not (isinstance(val, type) and issubclass(val, expected)):
        _fail(f"{val} is not a subclass of {expected.__name__}", reason)


# The older spellings.
check_true = true
check_false = false
check_none = is_none
check_not_none = is_not_none
check_eq = eq
check_not_eq = not_eq
check_gt = gt
check_gt_eq = gt_eq
check_lt = lt
check_lt_eq = lt_eq
check_eq_len = equal_lengths
check_len = len_eq
check_in = is_in
check_not_in = not_in
check_type = is_type
check_isinstance = is_instance
check_not_isinstance = is_not_instance
check_issubclass = is_subclass
