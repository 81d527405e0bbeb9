"""Length parsing and the harness's searcher-unit rule."""

from __future__ import annotations

import pytest

from determined.common.expconf import Length, Unit, parse_experiment_config, searcher_unit


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, Length(None, 0)),
        (7, Length(None, 7)),
        ({"batches": 1}, Length(Unit.BATCHES, 1)),
        ({"epochs": 3}, Length(Unit.EPOCHS, 3)),
        ({"records": 50000}, Length(Unit.RECORDS, 50000)),
    ],
)
def test_searcher_length_forms_round_trip(raw: object, expected: Length) -> None:
    length = Length.from_json(raw, minimum=1)
    assert length == expected
    assert length.to_json() == raw


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (-1, "positive integer"),
        (True, "exactly one key"),
        ("10", "exactly one key"),
        ({}, "exactly one key"),
        ({"batches": 1, "epochs": 1}, "exactly one key"),
        ({"steps": 1}, "unknown length unit 'steps'"),
        ({"batches": 0}, "batches must be an integer >= 1"),
        ({"batches": 1.5}, "batches must be an integer"),
        ({"batches": "1"}, "batches must be an integer"),
    ],
)
def test_bad_lengths_say_what_is_allowed(raw: object, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        Length.from_json(raw, minimum=1)
    assert fragment in str(info.value)


def test_period_lengths_allow_zero_but_not_int() -> None:
    assert Length.from_json({"batches": 0}, allow_int=False) == Length(Unit.BATCHES, 0)
    with pytest.raises(ValueError, match=r"\{batches\|epochs\|records: N\}"):
        Length.from_json(5, allow_int=False)


def _config(searcher: dict) -> dict:
    return {"entrypoint": "a:B", "searcher": {"name": "single", "metric": "m", **searcher}}


@pytest.mark.parametrize(
    ("searcher", "unit"),
    [
        ({"max_length": {"epochs": 2}}, Unit.EPOCHS),
        ({"max_length": {"batches": 2}}, Unit.BATCHES),
        ({"max_length": {"records": 2}}, Unit.RECORDS),
        ({"max_length": 2}, None),
        ({}, None),
    ],
)
def test_searcher_unit_from_max_length(searcher: dict, unit: Unit | None) -> None:
    raw = _config(searcher)
    assert searcher_unit(raw) is unit
    parsed = parse_experiment_config(raw)
    assert searcher_unit(parsed) is unit
    assert searcher_unit(parsed.to_json_dict()) is unit


def test_searcher_unit_key_overrides_max_length() -> None:
    raw = {"searcher": {"name": "custom", "metric": "m", "unit": "records"}}
    assert searcher_unit(raw) is Unit.RECORDS
    parsed = parse_experiment_config({**raw, "entrypoint": "a:B"})
    assert searcher_unit(parsed) is Unit.RECORDS
    both = {"searcher": {"unit": "epochs", "max_length": {"batches": 3}}}
    assert searcher_unit(both) is Unit.EPOCHS


@pytest.mark.parametrize("raw", [None, {}, {"searcher": 3}, {"searcher": {"max_length": "x"}}])
def test_searcher_unit_never_raises_on_malformed_input(raw: object) -> None:
    assert searcher_unit(raw) is None
