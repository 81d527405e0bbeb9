"""``LogFilter``: 0.37's filters of a trial's log lines, applied by the SDK."""

from __future__ import annotations

import datetime
import re
from typing import Any

from determined.experimental._sdk import _metrics
from determined.experimental._sdk._enums import LogLevel

_LEVELS = [level.value for level in LogLevel]
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _as_time(value: str | int | None, name: str) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{name} must be an RFC 3339 string or epoch seconds, not {value!r}")
    if isinstance(value, int):
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    if not _RFC3339.match(value):
        raise ValueError(f"{name} {value!r} is not RFC 3339 (e.g. 2021-10-26T23:17:12Z)")
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


class LogFilter:
    """0.37's ``iter_logs`` filters, applied to each line here (our master's log route takes
    ``follow``, ``head`` and ``tail`` only)."""

    def __init__(
        self,
        *,
        container_ids: list[str] | None = None,
        rank_ids: list[int] | None = None,
        stdtypes: list[str] | None = None,
        min_level: LogLevel | None = None,
        timestamp_before: str | int | None = None,
        timestamp_after: str | int | None = None,
        sources: list[str] | None = None,
        search_text: str | None = None,
    ) -> None:
        self.container_ids = set(container_ids) if container_ids else None
        self.rank_ids = set(rank_ids) if rank_ids else None
        self.stdtypes = set(stdtypes) if stdtypes else None
        self.min_level = _LEVELS.index(min_level.value) if min_level else None
        self.before = _as_time(timestamp_before, "timestamp_before")
        self.after = _as_time(timestamp_after, "timestamp_after")
        self.sources = set(sources) if sources else None
        self.search_text = search_text

    @property
    def empty(self) -> bool:
        return all(
            v is None
            for v in (
                self.container_ids,
                self.rank_ids,
                self.stdtypes,
                self.min_level,
                self.before,
                self.after,
                self.sources,
                self.search_text,
            )
        )

    def keeps(self, entry: dict[str, Any]) -> bool:
        if self.container_ids is not None and entry.get("containerId") not in self.container_ids:
            return False
        if self.rank_ids is not None and entry.get("rankId") not in self.rank_ids:
            return False
        if self.stdtypes is not None and entry.get("stdtype") not in self.stdtypes:
            return False
        if self.sources is not None and entry.get("source") not in self.sources:
            return False
        if self.min_level is not None:
            # A line without a level (UNSPECIFIED on the wire) counts as INFO, as it is shown.
            level = entry.get("level") or "LOG_LEVEL_INFO"
            if level == "LOG_LEVEL_UNSPECIFIED":
                level = "LOG_LEVEL_INFO"
            if level in _LEVELS and _LEVELS.index(level) < self.min_level:
                return False
        if self.before is not None or self.after is not None:
            when = _metrics.parse_time(entry.get("timestamp"))
            if when is not None and self.before is not None and when >= self.before:
                return False
            if when is not None and self.after is not None and when <= self.after:
                return False
        text = str(entry.get("log") or entry.get("message") or "")
        return self.search_text is None or self.search_text in text
