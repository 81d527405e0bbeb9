"""0.37's run filters and sorts (``SearchRuns``, ``KillRuns``, ... ``filter``/``sort``),
evaluated on rows this module is given, so both stores answer alike.

A filter is the JSON text of ``{"filterGroup": <node>, "showArchived": bool}``; a node is a
group (``kind: "group"``, ``conjunction: "and"|"or"``, ``children``) or a field (``kind:
"field"``, ``columnName``, ``location``, ``operator``, ``type``, ``value``). Keys are matched
without regard to case, as Go's JSON decoding does. Columns are 0.37's run columns
(:data:`COLUMNS`), ``hp.<name>`` (a trial's hyperparameter; dots go into nested ones),
``<group>.<metric>.<min|max|mean|last>`` (summary metrics: ``validation``/``training``) and
``metadata.<key>``. A sort is ``col=asc|desc`` separated by commas; ``id`` breaks ties.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

from determined.master._errors import InvalidArgument

# 0.37's run columns, here keys of the rows the router builds.
COLUMNS = frozenset(
    {
        "id", "experimentDescription", "experimentName", "tags", "searcherType",
        "searcherMetric", "startTime", "endTime", "duration", "state", "experimentProgress",
        "user", "forkedFrom", "resourcePool", "projectId", "checkpointSize", "checkpointCount",
        "searcherMetricsVal", "externalExperimentId", "externalRunId", "experimentId",
        "localId", "isExpMultitrial", "parentArchived", "archived",
    }
)  # fmt: skip
OPERATORS = frozenset({"=", "!=", "<", "<=", ">", ">=", "contains", "notContains", "isEmpty",
                       "notEmpty"})  # fmt: skip
_METRIC = re.compile(r"^(?P<group>.+?)\.(?P<name>.+)\.(?P<qualifier>min|max|mean|last)$")
_METRIC_GROUPS = {"validation": "validation_metrics", "training": "avg_metrics"}


@dataclasses.dataclass(frozen=True)
class Field:
    column: str
    operator: str
    value: Any = None


@dataclasses.dataclass(frozen=True)
class Group:
    conjunction: str  # "and" | "or"
    children: tuple[Field | Group, ...]


@dataclasses.dataclass(frozen=True)
class Filter:
    root: Group | Field
    show_archived: bool = False


def _lower_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k).lower(): v for k, v in obj.items()}
    raise InvalidArgument(f"filter: expected a JSON object, got {json.dumps(obj)[:80]}")


def _node(obj: Any, depth: int = 0) -> Group | Field:
    if depth > 32:
        raise InvalidArgument("filter: groups nest deeper than 32 levels")
    node = _lower_keys(obj)
    kind = node.get("kind")
    if kind == "group":
        conj = node.get("conjunction") or "and"
        if conj not in ("and", "or"):
            raise InvalidArgument(f"filter: conjunction {conj!r}; use 'and' or 'or'")
        children = node.get("children") or []
        if not isinstance(children, list):
            raise InvalidArgument("filter: a group's children must be a list")
        return Group(conj, tuple(_node(c, depth + 1) for c in children))
    if kind == "field":
        column = node.get("columnname")
        if not isinstance(column, str) or not _known_column(column):
            raise InvalidArgument(
                f"filter: invalid run column {column!r}; use one of {', '.join(sorted(COLUMNS))}, "
                "hp.<name>, metadata.<key> or <validation|training>.<metric>.<min|max|mean|last>"
            )
        op = node.get("operator") or "="
        if op not in OPERATORS:
            raise InvalidArgument(
                f"filter: invalid operator {op!r}; use one of {sorted(OPERATORS)}"
            )
        value = node.get("value")
        if value is None and op not in ("isEmpty", "notEmpty"):
            raise InvalidArgument(f"filter: column {column!r} with operator {op!r} needs a value")
        return Field(column, op, value)
    raise InvalidArgument(f"filter: node kind {kind!r}; use 'group' or 'field'")


def _known_column(column: str) -> bool:
    if column in COLUMNS or column.startswith(("hp.", "metadata.")):
        return True
    m = _METRIC.match(column)
    return m is not None and m["group"] in _METRIC_GROUPS


def parse_filter(text: str | None) -> Filter | None:
    """The filter of a request (None: no filter). Raises InvalidArgument saying what is wrong."""
    if text is None or not text.strip():
        return None
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise InvalidArgument(f"filter is not valid JSON: {e}") from None
    root = _lower_keys(obj)
    group = root.get("filtergroup")
    node: Group | Field = Group("and", ()) if group is None else _node(group)
    return Filter(node, bool(root.get("showarchived")))


def value_of(row: Mapping[str, Any], column: str) -> Any:
    """A run's value for a filter or sort column (None where it has none)."""
    if column in COLUMNS:
        return row.get(column)
    if column.startswith("hp."):
        value: Any = row.get("hparams") or {}
        for part in column[3:].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value
    if column.startswith("metadata."):
        value = row.get("metadata") or {}
        for part in column[9:].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value
    m = _METRIC.match(column)
    if m is None:
        return None
    group = (row.get("summaryMetrics") or {}).get(_METRIC_GROUPS.get(m["group"], "")) or {}
    metric = group.get(m["name"])
    return metric.get(m["qualifier"]) if isinstance(metric, dict) else None


def _comparable(value: Any) -> Any:
    """Numbers as floats, RFC 3339 times as datetimes, states without ``STATE_``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        if re.match(r"^\d{4}-\d\d-\d\d", value):
            try:
                parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return value
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=datetime.timezone.utc)
            return parsed
        return value.removeprefix("STATE_")
    return value


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _field_matches(f: Field, row: Mapping[str, Any]) -> bool:
    actual = value_of(row, f.column)
    if f.operator == "isEmpty":
        return _empty(actual)
    if f.operator == "notEmpty":
        return not _empty(actual)
    if f.operator in ("contains", "notContains"):
        text = json.dumps(actual) if isinstance(actual, (list, dict)) else str(actual or "")
        found = str(f.value).lower() in text.lower()
        return found if f.operator == "contains" else not found
    if actual is None:
        return False
    a, b = _comparable(actual), _comparable(f.value)
    try:
        if f.operator == "=":
            return bool(a == b)
        if f.operator == "!=":
            return bool(a != b)
        if f.operator == "<":
            return bool(a < b)
        if f.operator == "<=":
            return bool(a <= b)
        if f.operator == ">":
            return bool(a > b)
        return bool(a >= b)
    except TypeError:  # a number against text, say: no match, as SQL's cast would not
        return False


def _node_matches(node: Group | Field, row: Mapping[str, Any]) -> bool:
    if isinstance(node, Field):
        return _field_matches(node, row)
    if not node.children:
        return True
    results = (_node_matches(c, row) for c in node.children)
    return any(results) if node.conjunction == "or" else all(results)


def matches(flt: Filter | None, row: Mapping[str, Any]) -> bool:
    """Whether a run passes the filter; archived runs only with ``showArchived``."""
    if flt is None:
        return True
    if row.get("archived") and not flt.show_archived:
        return False
    return _node_matches(flt.root, row)


def parse_sort(text: str | None) -> list[tuple[str, bool]]:
    """``[(column, descending)]`` from ``col=asc,col2=desc``. Raises InvalidArgument."""
    out: list[tuple[str, bool]] = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        column, eq, direction = part.strip().partition("=")
        if not eq:
            raise InvalidArgument(f"invalid sort parameter: {part!r}; write col=asc|desc")
        if direction not in ("asc", "desc"):
            raise InvalidArgument(f"invalid sort direction: {direction!r}; use asc or desc")
        if not _known_column(column):
            raise InvalidArgument(f"invalid sort col: {column!r}")
        out.append((column, direction == "desc"))
    return out


def _sort_key(value: Any) -> tuple[int, Any]:
    c = _comparable(value)
    if isinstance(c, bool):
        return (0, float(c))
    if isinstance(c, float):
        return (0, c)
    if isinstance(c, datetime.datetime):
        return (1, c.timestamp())
    return (2, json.dumps(c, sort_keys=True) if isinstance(c, (list, dict)) else str(c))


def sort_rows(rows: list[dict[str, Any]], sort: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    """Rows in the sort's order, ``id`` ascending last unless the sort names it; missing values
    go last either way (0.37's ``NULLS LAST``)."""
    out = sorted(rows, key=lambda r: int(r["id"]))  # the tie-breaker: the sorts are stable
    for column, desc in reversed(sort):
        present = [r for r in out if value_of(r, column) is not None]
        missing = [r for r in out if value_of(r, column) is None]
        present.sort(key=lambda r: _sort_key(value_of(r, column)), reverse=desc)
        out = present + missing
    return out
