"""The hyperparameters section: typed models, nesting, bare constants, grid rules."""

from __future__ import annotations

import pytest

from determined.common.expconf import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    IntHP,
    LogHP,
    hyperparameters_to_json,
    iter_hyperparameters,
    parse_hyperparameters,
)


def parse(raw: object, grid: bool = False) -> tuple[dict, dict[str, str]]:
    problems: list[tuple[str, str]] = []
    space = parse_hyperparameters(raw, problems, grid=grid)
    return space, dict(problems)


def test_every_kind_and_bare_values() -> None:
    space, problems = parse(
        {
            "a": 1,
            "b": "s",
            "c": [1, 2],
            "d": None,
            "e": True,
            "k": {"type": "const", "val": {"x": 1}},
            "i": {"type": "int", "minval": 1, "maxval": 4, "count": 2},
            "f": {"type": "double", "minval": 0, "maxval": 1.5},
            "l": {"type": "log", "minval": -3, "maxval": -1, "base": 10},
            "g": {"type": "categorical", "vals": ["x", 2]},
        }
    )
    assert problems == {}
    assert space["a"] == ConstHP(val=1)
    assert space["c"] == ConstHP(val=[1, 2])
    assert space["d"] == ConstHP(val=None)
    assert space["k"] == ConstHP(val={"x": 1})
    assert space["i"] == IntHP(minval=1, maxval=4, count=2)
    assert space["f"] == DoubleHP(minval=0.0, maxval=1.5)
    assert space["l"] == LogHP(minval=-3.0, maxval=-1.0, base=10.0)
    assert space["g"] == CategoricalHP(vals=["x", 2])


def test_nested_space_and_sorted_iteration() -> None:
    space, problems = parse(
        {"z": 1, "opt": {"lr": {"type": "double", "minval": 0, "maxval": 1}, "b": 2}, "a": 3}
    )
    assert problems == {}
    assert isinstance(space["opt"], dict)
    paths = [path for path, _ in iter_hyperparameters(space)]
    assert paths == [("a",), ("opt", "b"), ("opt", "lr"), ("z",)]


def test_json_form_is_typed_and_reparses_to_the_same_space() -> None:
    space, _ = parse({"a": 1, "n": {"m": [1]}, "i": {"type": "int", "minval": 0, "maxval": 2}})
    data = hyperparameters_to_json(space)
    assert data == {
        "a": {"type": "const", "val": 1},
        "n": {"m": {"type": "const", "val": [1]}},
        "i": {"type": "int", "minval": 0, "maxval": 2, "count": None},
    }
    assert parse(data) == (space, {})


HP = "hyperparameters"


@pytest.mark.parametrize(
    ("raw", "path", "fragment"),
    [
        ({"x": {"type": "float"}}, "hyperparameters.x.type", "unknown hyperparameter type"),
        ({"x": {"type": 3}}, "hyperparameters.x.type", "unknown hyperparameter type"),
        ({"x": {"type": "int", "minval": 1}}, "hyperparameters.x.maxval", "is required"),
        ({"x": {"type": "int", "minval": 2, "maxval": 2}}, "hyperparameters.x", "less than"),
        ({"x": {"type": "int", "minval": 1.5, "maxval": 2}}, "hyperparameters.x.minval", "int"),
        ({"x": {"type": "double", "minval": 3, "maxval": 1}}, "hyperparameters.x", "less than"),
        ({"x": {"type": "int", "minval": 0, "maxval": 1, "count": 0}}, f"{HP}.x.count", "greater"),
        ({"x": {"type": "log", "minval": 0, "maxval": 1}}, "hyperparameters.x.base", "is required"),
        ({"x": {"type": "log", "minval": 0, "maxval": 1, "base": 0}}, f"{HP}.x.base", "than 0"),
        ({"x": {"type": "categorical", "vals": []}}, "hyperparameters.x.vals", "at least 1"),
        ({"x": {"type": "categorical"}}, "hyperparameters.x.vals", "is required"),
        ({"x": {"type": "const"}}, "hyperparameters.x.val", "is required"),
        ({"x": {"type": "int", "minval": 0, "maxval": 1, "bogus": 1}}, f"{HP}.x.bogus", "unknown"),
        ({"n": {"x": {"type": "nope"}}}, "hyperparameters.n.x.type", "unknown"),
        ({1: 2}, "hyperparameters.1", "names must be strings"),
        ([1], "hyperparameters", "must be a mapping"),
    ],
)  # fmt: skip
def test_errors_have_key_paths(raw: object, path: str, fragment: str) -> None:
    _, problems = parse(raw)
    assert path in problems, problems
    assert fragment in problems[path]


def test_grid_needs_count_on_ranges_only() -> None:
    raw = {
        "i": {"type": "int", "minval": 0, "maxval": 3},
        "d": {"type": "double", "minval": 0, "maxval": 1},
        "n": {"l": {"type": "log", "minval": 0, "maxval": 1, "base": 2}},
        "c": {"type": "categorical", "vals": [1]},
        "k": 5,
    }
    _, problems = parse(raw, grid=True)
    msg = "grid search is in use but count was not provided"
    expected = ["hyperparameters.i.count", "hyperparameters.d.count", "hyperparameters.n.l.count"]
    assert problems == dict.fromkeys(expected, msg)
    assert parse(raw, grid=False)[1] == {}
