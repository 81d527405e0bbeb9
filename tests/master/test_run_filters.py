"""0.37's run filter and sort language (``api._run_filters``): parsing (errors name what to
fix), matching against rows, sorting with missing values last; property tests with
hypothesis."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.master._errors import InvalidArgument
from determined.master.api._run_filters import matches, parse_filter, parse_sort, sort_rows


def _field(column: str, op: str, value: Any = None, **kw: Any) -> dict[str, Any]:
    return {"kind": "field", "columnName": column, "operator": op, "value": value, **kw}


def _flt(*children: dict[str, Any], conj: str = "and", archived: bool = False) -> str:
    group = {"kind": "group", "conjunction": conj, "children": list(children)}
    return json.dumps({"filterGroup": group, "showArchived": archived})


ROWS = [
    {"id": 1, "state": "STATE_COMPLETED", "experimentName": "alpha", "archived": False,
     "hparams": {"lr": 0.1, "opt": {"name": "sgd"}}, "tags": ["a", "b"],
     "startTime": "2024-01-02T00:00:00Z",
     "summaryMetrics": {"validation_metrics": {"loss": {"last": 0.5, "min": 0.4}}}},
    {"id": 2, "state": "STATE_ACTIVE", "experimentName": "beta", "archived": False,
     "hparams": {"lr": 0.01}, "tags": [], "startTime": "2024-03-01T00:00:00Z",
     "summaryMetrics": {"validation_metrics": {"loss": {"last": 0.2, "min": 0.2}}}},
    {"id": 3, "state": "STATE_CANCELED", "experimentName": "Alphabet", "archived": True,
     "hparams": {"lr": 1}, "tags": ["b"], "startTime": "2024-02-01T00:00:00Z",
     "summaryMetrics": {}},
]  # fmt: skip


def _ids(text: str) -> list[int]:
    flt = parse_filter(text)
    return [r["id"] for r in ROWS if matches(flt, r)]


def test_fields_and_groups() -> None:
    assert _ids(_flt(_field("experimentName", "contains", "ALPHA"))) == [1]
    assert _ids(_flt(_field("experimentName", "contains", "alpha"), archived=True)) == [1, 3]
    # States match with or without the STATE_ prefix (0.37 stores them without).
    assert _ids(_flt(_field("state", "=", "ACTIVE"))) == [2]
    assert _ids(_flt(_field("state", "!=", "STATE_ACTIVE"))) == [1]
    assert _ids(_flt(_field("hp.lr", ">=", 0.1), archived=True)) == [1, 3]
    assert _ids(_flt(_field("hp.opt.name", "=", "sgd"))) == [1]
    assert _ids(_flt(_field("hp.opt", "isEmpty"))) == [2]
    assert _ids(_flt(_field("validation.loss.last", "<", 0.3))) == [2]
    assert _ids(_flt(_field("validation.loss.min", "notEmpty"), archived=True)) == [1, 2]
    assert _ids(_flt(_field("tags", "contains", "a"))) == [1]
    assert _ids(_flt(_field("startTime", ">", "2024-02-15T00:00:00Z"))) == [2]
    either = _flt(_field("id", "=", 1), _field("id", "=", 2), conj="or")
    assert _ids(either) == [1, 2]
    nested = _flt(
        {"kind": "group", "conjunction": "or", "children": [_field("id", "=", 1)]},
        _field("state", "=", "COMPLETED"),
    )
    assert _ids(nested) == [1]
    # Keys in any case, as Go decodes JSON; an empty group matches every unarchived run.
    assert _ids('{"FilterGroup": {"Kind": "group", "Children": []}}') == [1, 2]
    assert parse_filter(None) is None and parse_filter("  ") is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        (_flt(_field("nope", "=", 1)), "invalid run column 'nope'"),
        (_flt(_field("id", "~", 1)), "invalid operator '~'"),
        (_flt(_field("id", "=")), "needs a value"),
        (_flt(_field("id", "=", 1)).replace('"and"', '"xor"'), "conjunction 'xor'"),
        ('{"filterGroup": {"kind": "leaf"}}', "node kind 'leaf'"),
    ],
)
def test_bad_filters_say_what_to_fix(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_filter(text)


def test_sort() -> None:
    rows = [dict(r, archived=False) for r in ROWS]
    assert [r["id"] for r in sort_rows(rows, parse_sort("hp.lr=desc"))] == [3, 1, 2]
    assert [r["id"] for r in sort_rows(rows, parse_sort("validation.loss.last=asc"))] == [2, 1, 3]
    # Missing values go last in both directions.
    assert [r["id"] for r in sort_rows(rows, parse_sort("validation.loss.last=desc"))] == [1, 2, 3]
    assert [r["id"] for r in sort_rows(rows, parse_sort("startTime=asc"))] == [1, 3, 2]
    assert [r["id"] for r in sort_rows(rows, parse_sort("id=desc"))] == [3, 2, 1]
    assert [r["id"] for r in sort_rows(rows, parse_sort(""))] == [1, 2, 3]
    for bad, message in (("id", "invalid sort parameter"), ("id=up", "invalid sort direction"),
                         ("color=asc", "invalid sort col")):  # fmt: skip
        with pytest.raises(InvalidArgument, match=message):
            parse_sort(bad)


_values = st.one_of(st.none(), st.integers(-5, 5), st.floats(-5, 5), st.text(max_size=4))


@given(
    rows=st.lists(st.fixed_dictionaries({"x": _values, "archived": st.booleans()}), max_size=12),
    op=st.sampled_from(
        ["=", "!=", "<", "<=", ">", ">=", "contains", "notContains", "isEmpty", "notEmpty"]
    ),  # fmt: skip
    value=_values.filter(lambda v: v is not None),
    desc=st.booleans(),
)
def test_properties(rows: list[dict[str, Any]], op: str, value: Any, desc: bool) -> None:
    rows = [{"id": i, "hparams": {"x": r["x"]}, "archived": r["archived"]} for i, r in
            enumerate(rows)]  # fmt: skip
    flt = parse_filter(_flt(_field("hp.x", op, value), archived=True))
    negated = {"=": "!=", "contains": "notContains", "isEmpty": "notEmpty"}
    hits = {r["id"] for r in rows if matches(flt, r)}
    if op in negated:  # a field and its negation split the runs that have a value
        other = parse_filter(_flt(_field("hp.x", negated[op], value), archived=True))
        misses = {r["id"] for r in rows if matches(other, r)}
        assert not hits & misses
        if op != "=":
            assert hits | misses == {r["id"] for r in rows}
    # Archived rows only with showArchived; sorting keeps every row once.
    hidden = parse_filter(_flt(_field("hp.x", op, value)))
    assert all(not r["archived"] for r in rows if matches(hidden, r))
    ordered = sort_rows(rows, [("hp.x", desc)])
    assert sorted(r["id"] for r in ordered) == [r["id"] for r in rows]
    present = [r for r in ordered if r["hparams"]["x"] is not None]
    assert ordered[: len(present)] == present  # missing values last
