"""Go duration strings (``90s``, ``1h30m``): 0.37's master config and API take them."""

from __future__ import annotations

import datetime
import re

_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> datetime.timedelta:
    """A Go duration string (``90s``, ``1h30m``, ``2.5h``), as Go's ``time.ParseDuration``
    reads it; days and weeks are not Go units.

    Raises:
        ValueError: not a duration, or a negative one.
    """
    body = text.strip()
    if body.startswith("-"):
        raise ValueError("must not be negative")
    body = body.removeprefix("+")
    if body == "0":
        return datetime.timedelta(0)
    seconds, pos = 0.0, 0
    for m in _GO_PART.finditer(body):
        if m.start() != pos:
            break
        seconds += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise ValueError(f"{text!r} is not a Go duration (units ns, us, ms, s, m, h: 24h, 90m)")
    return datetime.timedelta(seconds=seconds)
