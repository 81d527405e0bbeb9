"""UTC timestamps as the store keeps them and as the wire shows them (RFC 3339)."""

from __future__ import annotations

import datetime


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def as_utc(dt: datetime.datetime) -> datetime.datetime:
    """SQLite hands back naive datetimes; every one the store wrote is UTC."""
    return dt.replace(tzinfo=datetime.timezone.utc) if dt.tzinfo is None else dt


def rfc3339(dt: datetime.datetime | None) -> str | None:
    """The gateway's timestamp form (protobuf JSON), or None: no fraction for whole seconds, else
    3 or 6 digits as needed (``2024-01-02T03:04:05Z``, ``...05.120Z``, ``...05.123456Z``)."""
    if dt is None:
        return None
    utc = as_utc(dt).astimezone(datetime.timezone.utc)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    micros = utc.microsecond
    if micros == 0:
        return text + "Z"
    if micros % 1000 == 0:
        return f"{text}.{micros // 1000:03d}Z"
    return f"{text}.{micros:06d}Z"


def parse(value: str | None) -> datetime.datetime | None:
    """An RFC 3339 timestamp from a request (``Z`` or an offset), as aware UTC; None if absent.

    Raises:
        ValueError: not a timestamp.
    """
    if not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    # fromisoformat before 3.11 takes at most 6 fractional digits; Go sends up to 9.
    if "." in text:
        head, _, rest = text.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    dt = datetime.datetime.fromisoformat(text)
    return as_utc(dt).astimezone(datetime.timezone.utc)
