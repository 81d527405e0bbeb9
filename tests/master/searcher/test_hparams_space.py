"""Hyperparameter spaces: parsing, sampling bounds, grid axes
(docs/reference/master.md §1.2, §1.4, §6 items 5-9)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.errors import InvalidSearcherConfig
from determined.master.searcher import NpRand, grid, parse_hyperparameters, sample
from determined.master.searcher._hparams import Const, Nested


def test_scalars_are_constants_and_untyped_dicts_are_nested() -> None:
    space = parse_hyperparameters({"a": 3, "b": [1, 2], "c": {"x": {"type": "const", "val": 1}}})
    assert space["a"] == Const(3) and space["b"] == Const([1, 2])
    assert isinstance(space["c"], Nested)
    assert sample(space, NpRand(0)) == {"a": 3, "b": [1, 2], "c": {"x": 1}}


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"type": "float", "minval": 0, "maxval": 1}, "unknown type 'float'"),
        ({"type": "int", "minval": 3, "maxval": 3}, "must be less than maxval"),
        ({"type": "int", "minval": 0.5, "maxval": 3}, "must be an integer"),
        ({"type": "log", "minval": 0, "maxval": 1, "base": 0}, "base must be > 0"),
        ({"type": "double", "minval": 0, "maxval": 1, "count": 0}, "count must be >= 1"),
        ({"type": "categorical", "vals": []}, "non-empty list"),
        ({"type": "const"}, "needs 'val'"),
    ],
)
def test_invalid_hyperparameters_are_rejected_with_the_fix(raw: dict, needle: str) -> None:
    with pytest.raises(InvalidSearcherConfig, match=needle):
        parse_hyperparameters({"h": raw})


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(-50, 50), st.integers(1, 5))
def test_samples_respect_bounds(seed: int, lo: int, width: int) -> None:
    space = parse_hyperparameters(
        {
            "i": {"type": "int", "minval": lo, "maxval": lo + width},
            "d": {"type": "double", "minval": lo, "maxval": lo + width},
            "l": {"type": "log", "minval": -2, "maxval": 1, "base": 10},
            "c": {"type": "categorical", "vals": ["a", "b", "c"]},
        }
    )
    rand = NpRand(seed)
    for _ in range(20):
        s = sample(space, rand)
        assert lo <= s["i"] <= lo + width and isinstance(s["i"], int)
        assert lo <= s["d"] < lo + width
        assert 10**-2 <= s["l"] < 10**1
        assert s["c"] in ("a", "b", "c")


def test_int_samples_reach_both_bounds() -> None:
    space = parse_hyperparameters({"i": {"type": "int", "minval": 1, "maxval": 2}})
    rand = NpRand(3)
    assert {sample(space, rand)["i"] for _ in range(50)} == {1, 2}


def test_sampling_order_is_sorted_names_and_matches_numpy_draws() -> None:
    import numpy as np

    space = parse_hyperparameters(
        {
            "z": {"type": "int", "minval": 0, "maxval": 9},
            "a": {"nested": {"type": "double", "minval": 0, "maxval": 1}},
        }
    )
    s = sample(space, NpRand(11))
    rs = np.random.RandomState(11)
    assert s["a"]["nested"] == rs.uniform(0, 1)  # "a" before "z"
    assert s["z"] == rs.randint(0, 10)


def test_grid_axes_count_clamp_midpoint_and_rounding() -> None:
    points = grid(
        parse_hyperparameters(
            {
                "i": {"type": "int", "minval": 0, "maxval": 3, "count": 10},  # clamped to 4
                "m": {"type": "int", "minval": 1, "maxval": 4, "count": 1},  # 2.5 -> 3
                "r": {"type": "int", "minval": 0, "maxval": 5, "count": 3},  # 0, 2.5->3, 5
                "d": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 3},
                "l": {"type": "log", "minval": 0, "maxval": 2, "base": 10, "count": 2},
                "c": {"type": "categorical", "vals": ["x", "y"]},
            }
        )
    )
    assert len(points) == 2 * 3 * 2 * 4 * 1 * 3
    assert sorted({p["i"] for p in points}) == [0, 1, 2, 3]
    assert {p["m"] for p in points} == {3}
    assert sorted({p["r"] for p in points}) == [0, 3, 5]
    assert sorted({p["d"] for p in points}) == [0.0, 0.5, 1.0]  # endpoints included
    assert sorted({p["l"] for p in points}) == [1.0, 100.0]
    # First axis (sorted names: c, d, i, l, m, r) varies slowest.
    assert [p["c"] for p in points[:72]] == ["x"] * 72
    assert points[0]["r"] == 0 and points[1]["r"] == 3


def test_grid_rounds_half_away_from_zero() -> None:
    points = grid(
        parse_hyperparameters({"i": {"type": "int", "minval": -3, "maxval": -2, "count": 1}})
    )
    assert points == [{"i": -3}]  # -2.5 -> -3


def test_grid_needs_count() -> None:
    with pytest.raises(InvalidSearcherConfig, match="count was not provided.*'n.lr'"):
        grid(parse_hyperparameters({"n": {"lr": {"type": "double", "minval": 0, "maxval": 1}}}))


def test_grid_nested_and_empty_space() -> None:
    points = grid(
        parse_hyperparameters({"n": {"b": [1], "a": {"type": "categorical", "vals": [1, 2]}}})
    )
    assert points == [{"n": {"a": 1, "b": [1]}}, {"n": {"a": 2, "b": [1]}}]
    assert grid({}) == [{}]
    assert math.isclose(
        grid(
            parse_hyperparameters(
                {"l": {"type": "log", "minval": 1, "maxval": 3, "base": 2, "count": 1}}
            )
        )[0]["l"],
        4.0,
    )
