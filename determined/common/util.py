"""``determined.common.util``: small helpers that trial and tooling code of the 0.37 era imports
(YAML through ruamel.yaml, chunking, sizes, retries, deprecation)."""

from __future__ import annotations

import functools
import io
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar, cast

from ruamel import yaml

T = TypeVar("T")
U = TypeVar("U", bound=Callable[..., Any])

# 0.37's names of the metric groups that existed before generic metrics (trial code and 0.37's
# own e2e fixtures read them from here); "inference" is the third reserved group.
_LEGACY_TRAINING = "training"
_LEGACY_VALIDATION = "validation"
_INFERENCE = "inference"

# One YAML object per flow style: building one is slow, and they are reusable.
_yamls: dict[bool | None, yaml.YAML] = {}


def _get_yaml(default_flow_style: bool | None = None) -> yaml.YAML:
    y = _yamls.get(default_flow_style)
    if y is None:
        y = yaml.YAML(typ="safe", pure=True)
        if default_flow_style is not None:
            y.default_flow_style = default_flow_style
        _yamls[default_flow_style] = y
    return y


def yaml_safe_load(f: IO[Any] | str) -> Any:
    """Parse YAML (a string or a stream) with only plain types, like the old
    ``ruamel.yaml.safe_load``."""
    return _get_yaml().load(f)


def yaml_safe_dump(
    data: Any, stream: IO[Any] | None = None, default_flow_style: bool | None = None
) -> Any:
    """Write ``data`` as YAML to ``stream``, or return it as a string when there is none."""
    y = _get_yaml(default_flow_style)
    if stream is not None:
        return y.dump(data, stream=stream)
    out = io.StringIO()
    y.dump(data, stream=out)
    return out.getvalue()


def safe_load_yaml_with_exceptions(yaml_file: IO[Any] | str) -> Any:
    """:func:`yaml_safe_load`, with a parse error turned into a ValueError that says where."""
    try:
        return yaml_safe_load(yaml_file)
    except (yaml.YAMLError, yaml.constructor.DuplicateKeyError) as e:
        raise ValueError(f"the YAML does not parse: {e}") from e


def chunks(lst: Sequence[T], chunk_size: int) -> Iterator[Sequence[T]]:
    """``lst`` in pieces of ``chunk_size`` (the last may be shorter): ``"ABCDE", 2 -> AB CD E``."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, not {chunk_size}")
    for i in range(0, len(lst), chunk_size):
        yield lst[i : i + chunk_size]


def sizeof_fmt(val: int | float) -> str:
    """A byte count in binary units: ``1536 -> "1.5KB"``."""
    val = float(val)
    for unit in ("", "K", "M", "G", "T", "P", "E", "Z"):
        if abs(val) < 1024.0:
            return f"{val:3.1f}{unit}B"
        val /= 1024.0
    return f"{val:.1f}YB"


def debug_mode() -> bool:
    """True when ``DET_DEBUG`` is true, 1 or yes."""
    return os.getenv("DET_DEBUG", "").lower() in ("true", "1", "yes")


def preserve_random_state(fn: U) -> U:
    """Decorate ``fn`` so that it runs on a fork of ``random``'s state."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        state = random.getstate()
        try:
            return fn(*args, **kwargs)
        finally:
            random.setstate(state)

    return cast(U, wrapped)


def wait_for(
    predicate: Callable[[], tuple[bool, T]], timeout: int = 60, interval: float = 0.1
) -> T:
    """Call ``predicate`` until it returns ``(True, value)``; return ``value``. TimeoutError
    after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while True:
        done, value = predicate()
        if done:
            return value
        if time.time() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {predicate!r}")
        time.sleep(interval)


def deprecated(message: str | None = None) -> Callable[[U], U]:
    """Decorate a function to warn (DeprecationWarning) on each call."""

    def decorator(func: U) -> U:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            text = f"{func.__name__} is deprecated and will be removed in a future version."
            warnings.warn(f"{text} {message}." if message else text, DeprecationWarning, 2)
            return func(*args, **kwargs)

        return cast(U, wrapper)

    return decorator


def strtobool(val: str) -> bool:
    """False for empty, n, no, f, false, off and 0 (any case); True for any other string."""
    return bool(val and val.lower() not in ("n", "no", "f", "false", "off", "0"))
