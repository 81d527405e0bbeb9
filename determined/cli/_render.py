"""Output of ``det``: presto tables (the reference's format), CSV, JSON, times and percentages.

The reference renders with ``tabulate``; this module draws the same "presto" layout without that
dependency: a header row, a ``-----+-----`` rule, numbers right-aligned, multi-line cells (pretty
JSON of hyperparameters) stacked line by line.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml


class CliError(Exception):
    """A user-facing failure: ``det`` prints the message (no traceback) and exits 1."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    return str(value)


def _layout(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [[_cell(v).split("\n") for v in row] for row in rows]
    numeric = [
        all(_is_number(row[i]) or row[i] is None for row in rows) and len(rows) > 0
        for i in range(len(headers))
    ]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, lines in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in lines))

    def fmt(parts: Sequence[str], align_right: Sequence[bool]) -> str:
        padded = [
            p.rjust(w) if right else p.ljust(w)
            for p, w, right in zip(parts, widths, align_right, strict=True)
        ]
        return (" " + " | ".join(padded)).rstrip()

    # The rule spans one space each side of every column, joined by "+", as presto draws it.
    lines = [fmt(list(headers), numeric), "+".join("-" * (w + 2) for w in widths)]
    for row in cells:
        height = max((len(c) for c in row), default=1)
        for k in range(height):
            parts = [c[k] if k < len(c) else "" for c in row]
            lines.append(fmt(parts, numeric))
    return lines


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    as_csv: bool = False,
    out: TextIO | None = None,
) -> None:
    """Print rows under headers, as a presto table or (``as_csv``) CSV."""
    out = out or sys.stdout
    if as_csv:
        writer = csv.writer(out)
        writer.writerow(headers)
        writer.writerows([[_cell(v) for v in row] for row in rows])
        return
    for line in _layout(headers, rows):
        print(line.rstrip(), file=out)


def print_json(obj: Any) -> None:
    """Indented JSON, as the reference's ``--json`` (without colours)."""
    print(json.dumps(obj, indent=2, sort_keys=False))


def print_yaml(obj: Any) -> None:
    yaml.safe_dump(obj, sys.stdout, default_flow_style=False, sort_keys=True)


def format_time(value: str | None) -> str | None:
    """``2024-05-01T12:00:00.123Z`` -> ``2024-05-01 12:00:00+0000`` (UTC)."""
    if not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    # fromisoformat in 3.10 accepts at most 6 fractional digits; the gateway may write 9.
    if "." in text:
        head, _, rest = text.partition(".")
        digits = "".join(ch for ch in rest if ch.isdigit())
        tz = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{tz}"
    try:
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        return value
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S%z")


def format_percent(value: float | None) -> str | None:
    """``0.125`` -> ``12.5%``."""
    if value is None:
        return None
    return f"{float(value):.1%}"


def strip_state(state: Any) -> str:
    """``STATE_ACTIVE`` -> ``ACTIVE``."""
    return str(state or "").replace("STATE_", "")


def sizeof_fmt(num: float) -> str:
    """Bytes as the reference prints them: ``1.2KB``, ``3.0MB``."""
    for unit in ("", "K", "M", "G", "T", "P"):
        if abs(num) < 1024.0:
            return f"{num:.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}EB"


def format_resources(resources: dict[str, Any] | None) -> str:
    return "\n".join(sorted((resources or {}).keys()))


def format_resource_sizes(resources: dict[str, Any] | None) -> str:
    if not resources:
        return ""
    return sizeof_fmt(sum(float(v) for v in resources.values()))


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=4)


def truth(text: str) -> bool:
    """A true/false command-line value as 0.37 reads it (true, t, yes, y, on, 1, and the
    opposites); an ``argparse.ArgumentTypeError`` otherwise."""
    value = text.strip().lower()
    if value in ("true", "t", "yes", "y", "on", "1"):
        return True
    if value in ("false", "f", "no", "n", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def yes_or_no(prompt: str) -> bool:
    """Ask on the terminal; a closed stdin counts as "no"."""
    while True:
        try:
            choice = input(f"{prompt} [y/n]: ").strip().lower()
        except (EOFError, KeyboardInterrupt):
            print()
            return False
        if choice in ("y", "yes"):
            return True
        if choice in ("n", "no"):
            return False
        print("Please respond with 'y' or 'n'")
