"""``GET /api/v1/experiments``' filters and sorting (api/_experiment_filters.py) as properties
over generated experiment bodies; tests/sdk/test_client_gaps.py drives them on a master."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.master._errors import InvalidArgument
from determined.master.api._experiment_filters import (
    SORT_KEYS,
    ExperimentFilter,
    IdFilter,
    sort_experiments,
)

NAMES = st.sampled_from(["Alpha", "alpha-2", "BETA", "gamma", ""])
LABELS = st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3)


@st.composite
def experiments(draw: st.DrawFn) -> list[dict[str, Any]]:
    ids = draw(st.lists(st.integers(1, 60), unique=True, max_size=12))
    return [
        {
            "id": i,
            "name": draw(NAMES),
            "description": draw(st.one_of(st.none(), NAMES)),
            "labels": draw(LABELS),
            "state": draw(st.sampled_from(["STATE_ACTIVE", "STATE_PAUSED", "STATE_COMPLETED"])),
            "username": draw(st.sampled_from(["admin", "determined"])),
            "userId": draw(st.sampled_from([1, 2])),
            "archived": draw(st.booleans()),
            "endTime": draw(st.one_of(st.none(), st.sampled_from(["2024-01-01", "2025-01-01"]))),
            "progress": draw(st.one_of(st.none(), st.floats(0, 1))),
            "checkpointSize": draw(st.one_of(st.none(), st.integers(0, 10**12).map(str))),
        }
        for i in ids
    ]


@given(experiments(), NAMES, LABELS, st.lists(st.sampled_from(["STATE_PAUSED", "STATE_ACTIVE"])))
def test_a_filter_keeps_exactly_what_matches_every_part(
    rows: list[dict[str, Any]], name: str, labels: list[str], states: list[str]
) -> None:
    f = ExperimentFilter(name=name, labels=labels, states=states)
    for e in rows:
        expected = (
            name.lower() in e["name"].lower()
            and all(label in e["labels"] for label in labels)
            and (not states or e["state"] in states)
        )
        assert f.keeps(e) == expected


@given(
    st.integers(0, 60),
    st.one_of(st.none(), st.integers(0, 60)),
    st.one_of(st.none(), st.integers(0, 60)),
    st.lists(st.integers(0, 60), max_size=4),
    st.lists(st.integers(0, 60), max_size=4),
)
def test_id_bounds_all_hold(
    value: int, gt: int | None, lte: int | None, incl: list[int], not_in: list[int]
) -> None:
    f = IdFilter(gt=gt, lte=lte, incl=incl, not_in=not_in)
    expected = (
        (gt is None or value > gt)
        and (lte is None or value <= lte)
        and (not incl or value in incl)
        and value not in not_in
    )
    assert f.holds(value) == expected


@given(experiments(), st.sampled_from(sorted(SORT_KEYS)), st.sampled_from(["", "ORDER_BY_DESC"]))
def test_sorting_orders_by_the_field_then_id_with_missing_values_last(
    rows: list[dict[str, Any]], sort_by: str, order_by: str
) -> None:
    out = sort_experiments(rows, sort_by, order_by)
    assert sorted(e["id"] for e in out) == sorted(e["id"] for e in rows)
    key = SORT_KEYS[sort_by]

    def value(e: dict[str, Any]) -> Any:
        v = e.get(key)
        if key == "progress":
            return v or 0.0
        return int(v) if key == "checkpointSize" and v is not None else v

    present = [e for e in out if value(e) is not None]
    assert out[: len(present)] == present  # every missing value after the present ones
    keys = [(value(e), e["id"]) for e in present]
    assert keys == sorted(keys, reverse=order_by == "ORDER_BY_DESC")


def test_unknown_sorting_is_a_400_naming_the_choices() -> None:
    with pytest.raises(InvalidArgument, match="SORT_BY_NAME"):
        sort_experiments([], "SORT_BY_COLOUR")
    with pytest.raises(InvalidArgument, match="ORDER_BY_DESC"):
        sort_experiments([], "SORT_BY_ID", "sideways")
