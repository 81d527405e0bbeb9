"""Training lengths (``{batches: N}``, ``{epochs: N}``, ``{records: N}`` or a unitless int) and
the harness's searcher-unit rule."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer


class Unit(str, enum.Enum):
    """The unit of a length; the value is the config key (``batches`` ...)."""

    BATCHES = "batches"
    RECORDS = "records"
    EPOCHS = "epochs"


_KEYS = "{batches|epochs|records: N}"


@dataclass(frozen=True)
class Length:
    """A training length. ``unit`` is None for the unitless int form of ``searcher.max_length``
    (the reference's "unitless" length, used with Core API trials that count their own units).
    """

    unit: Unit | None
    value: int

    @classmethod
    def from_json(cls, raw: Any, *, minimum: int = 0, allow_int: bool = True) -> Length:
        """Parse the config form. ``minimum`` bounds the value of the object form; a unitless
        int must be >= 0. Raises ValueError with a message naming the accepted forms."""
        if allow_int and isinstance(raw, int) and not isinstance(raw, bool):
            if raw < 0:
                raise ValueError(f"must be a positive integer or {_KEYS} (got {raw!r})")
            return cls(None, raw)
        if isinstance(raw, Length):
            return raw
        if not isinstance(raw, Mapping) or len(raw) != 1:
            forms = f"a positive integer or {_KEYS}" if allow_int else f"{_KEYS}"
            raise ValueError(f"must be {forms} with exactly one key (got {raw!r})")
        ((key, value),) = raw.items()
        try:
            unit = Unit(key)
        except ValueError:
            raise ValueError(
                f"unknown length unit {key!r}; use one of batches, epochs, records"
            ) from None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{key} must be an integer >= {minimum} (got {value!r})")
        return cls(unit, value)

    def to_json(self) -> int | dict[str, int]:
        """The config form: an int when unitless, else ``{unit: value}``."""
        if self.unit is None:
            return self.value
        return {self.unit.value: self.value}


def _searcher_length(raw: Any) -> Length:
    return Length.from_json(raw, minimum=1)


def _period_length(raw: Any) -> Length:
    return Length.from_json(raw, minimum=0, allow_int=False)


def _dump(length: Length) -> int | dict[str, int]:
    return length.to_json()


# ``searcher.max_length``: int >= 0 or {unit: N >= 1}.
SearcherLength = Annotated[
    Length, BeforeValidator(_searcher_length), PlainSerializer(_dump, return_type=Any)
]
# ``min_validation_period`` / ``min_checkpoint_period``: {unit: N >= 0}.
PeriodLength = Annotated[
    Length, BeforeValidator(_period_length), PlainSerializer(_dump, return_type=Any)
]


def searcher_unit(config: Any) -> Unit | None:
    """The unit searcher operations are counted in (docs/reference/harness.md §7): ``searcher.unit``
    when set, else the single key of a ``searcher.max_length`` object; an int or missing
    ``max_length`` gives None.

    Accepts an ExperimentConfig or a plain (defaulted or raw) config dict, so the harness can
    call it on ``ClusterInfo.trial._config``. Never raises on a malformed section: it returns
    None, and validation reports the problem where the config is parsed.
    """
    searcher = getattr(config, "searcher", None)
    if searcher is not None and not isinstance(config, Mapping):
        unit = getattr(searcher, "unit", None)
        if unit is not None:
            return Unit(unit)
        length = getattr(searcher, "max_length", None)
        return length.unit if isinstance(length, Length) else None
    section = config.get("searcher") if isinstance(config, Mapping) else None
    if not isinstance(section, Mapping):
        return None
    unit = section.get("unit")
    if isinstance(unit, str) and unit in Unit._value2member_map_:
        return Unit(unit)
    raw = section.get("max_length")
    if isinstance(raw, Mapping) and len(raw) == 1:
        (key,) = raw
        if key in Unit._value2member_map_:
            return Unit(key)
    return None
