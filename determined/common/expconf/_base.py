"""The base of every config section, and the translation of pydantic errors into
``(key_path, message)`` problems."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

Problems = list[tuple[str, str]]

S = TypeVar("S", bound="Section")


class Section(BaseModel):
    """A config section: unknown keys rejected, no type coercion (``"5"`` is not an int, as in
    the reference's JSON schemas), immutable once parsed."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, arbitrary_types_allowed=True
    )
    # The reference's schemas allow null for every optional key and read it as "use the
    # default"; a section that stores null as a value (a const hyperparameter) turns this off.
    _null_means_default: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if cls._null_means_default and isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k not in cls.model_fields}
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """The section as JSON-ready data, every default filled in."""
        return self.model_dump(mode="json")


def join_path(prefix: str, loc: Sequence[Any]) -> str:
    """``("resources", "devices", 0, "mode")`` -> ``resources.devices[0].mode``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not str(part).isprintable() or not str(part):
            out += f"[{str(part)!r}]"  # a key such as "\r" stays visible and on one line
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def _describe(err: Any, model: type[BaseModel] | None) -> str:
    kind = err["type"]
    got = err.get("input")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        if model is not None and len(err["loc"]) == 1:
            allowed = ", ".join(sorted(model.model_fields))
            return f"unknown key; allowed keys here are: {allowed}"
        return "unknown key"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        return msg[len("Value error, ") :]
    if msg.startswith("Assertion failed, "):
        msg = msg[len("Assertion failed, ") :]
    text = msg[0].lower() + msg[1:] if msg else kind
    return f"{text} (got {got!r})"


def problems_from(exc: ValidationError, prefix: str, model: type[BaseModel] | None) -> Problems:
    """One problem per pydantic error, with the key path joined onto ``prefix``."""
    out: Problems = []
    for err in exc.errors(include_url=False):
        out.append((join_path(prefix, err["loc"]), _describe(err, model)))
    return out


def validate(model: type[S], data: Any, prefix: str, problems: Problems) -> S | None:
    """Validate one section; on failure record its problems under ``prefix`` and return None."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append((prefix, f"must be a mapping (got {data!r})"))
        return None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems.extend(problems_from(e, prefix, model))
        return None


def type_error(value: Any, expected: str) -> str:
    return f"must be {expected} (got {value!r})"
