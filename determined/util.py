"""``determined.util``: helpers that legacy trial code imports (``det.util.make_metrics``,
``calculate_batch_sizes``, ``is_numerical_scalar``, ...)."""

from __future__ import annotations

import collections
import copy
import inspect
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from determined import errors
from determined.common import check
from determined.tensorboard._writer import is_numerical_scalar

logger = logging.getLogger("determined")

__all__ = [
    "calculate_batch_sizes",
    "get_member_func",
    "has_param",
    "humanize_float",
    "is_numerical_scalar",
    "is_overridden",
    "legacy_trial_entrypoint_to_script",
    "make_metrics",
    "make_timing_log",
    "mask_checkpoint_storage",
    "mask_config_dict",
    "match_legacy_trial_class",
    "merge_dicts",
    "validate_batch_metrics",
]

_LEGACY_TRIAL_CLASS = re.compile(r"^[a-zA-Z0-9_.]+:[a-zA-Z0-9_]+$")


def is_overridden(full_method: Any, parent_class: Any) -> bool:
    """Whether the (bound or unbound) method ``full_method`` is defined below ``parent_class``."""
    if callable(full_method):
        return bool(full_method.__qualname__.partition(".")[0] != parent_class.__name__)
    return False


def has_param(fn: Callable[..., Any], name: str, pos: int | None = None) -> bool:
    """Whether ``fn`` has a positional parameter ``name`` (or at least ``pos + 1`` of them)."""
    args = inspect.getfullargspec(fn).args
    if name in args:
        return True
    return pos is not None and pos < len(args)


def get_member_func(obj: Any, func_name: str) -> Any:
    """``obj.func_name`` if it is callable, else None."""
    member = getattr(obj, func_name, None)
    return member if callable(member) else None


def merge_dicts(base_dict: dict[Any, Any], source_dict: dict[Any, Any]) -> dict[Any, Any]:
    """A new dict: ``source_dict`` merged into a deep copy of ``base_dict``, recursively."""
    merged = copy.deepcopy(base_dict)
    for key, value in source_dict.items():
        if key in base_dict and isinstance(value, dict) and isinstance(base_dict[key], dict):
            merged[key] = merge_dicts(base_dict[key], value)
        else:
            merged[key] = value
    return merged


def validate_batch_metrics(batch_metrics: list[dict[str, Any]]) -> None:
    """Every batch must report the same metric names (CheckFailedError says which differs)."""
    if not batch_metrics:
        return
    names = batch_metrics[0].keys()
    for idx, metrics in enumerate(batch_metrics):
        if metrics.keys() != names:
            check.eq(names, metrics.keys(), f"inconsistent training metrics: index: {idx}")


def make_metrics(num_inputs: int | None, batch_metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"batch_metrics": batch_metrics, "avg_metrics": {...}, "num_inputs": n}``: each
    average skips None values, and is None for values that cannot be averaged."""
    import numpy as np

    validate_batch_metrics(batch_metrics)
    columns: dict[str, list[Any]] = collections.defaultdict(list)
    for metrics in batch_metrics:
        for name, value in metrics.items():
            columns[name].append(value)
    avg: dict[str, float | None] = {}
    for name, values in columns.items():
        present = [v for v in values if v is not None]
        try:
            avg[name] = float(np.mean(np.array(present))) if present else None
        except (TypeError, ValueError):
            avg[name] = None  # non-scalars: the name stays visible, without a value
    out: dict[str, Any] = {"batch_metrics": batch_metrics, "avg_metrics": avg}
    if num_inputs is not None:
        out["num_inputs"] = num_inputs
    return out


def humanize_float(n: float) -> float:
    """``n`` rounded to about four significant digits (integer parts are kept)."""
    if n == 0 or not math.isfinite(n):
        return n
    digits = int(math.ceil(math.log10(abs(n))))
    return round(n, max(digits, 4) - digits)


def make_timing_log(verb: str, duration: float, num_inputs: int, num_batches: int) -> str:
    rps = humanize_float(num_inputs / duration if duration else math.inf)
    bps = humanize_float(num_batches / duration if duration else math.inf)
    return (
        f"{verb}: {num_inputs} records in {humanize_float(duration)}s ({rps} records/s), "
        f"in {num_batches} batches ({bps} batches/s)"
    )


def calculate_batch_sizes(
    hparams: dict[str, Any], slots_per_trial: int, trialname: str
) -> tuple[int, int]:
    """``(per_slot_batch_size, global_batch_size)`` from the ``global_batch_size``
    hyperparameter, rounded down to a multiple of the slots (with a warning)."""
    slots = max(slots_per_trial, 1)
    if "global_batch_size" not in hparams:
        raise errors.InvalidExperimentException(
            "add an integer `global_batch_size` hyperparameter to the experiment config: "
            f"{trialname}-based training needs it"
        )
    gbs = hparams["global_batch_size"]
    if not isinstance(gbs, int) or isinstance(gbs, bool):
        raise errors.InvalidExperimentException(
            f"the `global_batch_size` hyperparameter must be an integer, not {type(gbs).__name__}"
        )
    if gbs < slots:
        raise errors.InvalidExperimentException(
            f"set `global_batch_size` ({gbs}) to at least the number of slots ({slots})"
        )
    per_slot = gbs // slots
    effective = per_slot * slots
    if effective != gbs:
        logger.warning(
            f"`global_batch_size` changed from {gbs} to {effective} to divide equally across "
            f"{slots} slots"
        )
    return per_slot, effective


def match_legacy_trial_class(arg: str) -> bool:
    """Whether an entrypoint is the ``module.sub:ClassName`` form of a trial class."""
    return bool(_LEGACY_TRIAL_CLASS.match(arg))


def legacy_trial_entrypoint_to_script(trial_entrypoint: str) -> list[str]:
    return ["python3", "-m", "determined.exec.harness", trial_entrypoint]


def mask_checkpoint_storage(d: dict[str, Any]) -> dict[str, Any]:
    """A copy of a checkpoint_storage dict with its credentials replaced by ``********``."""
    masked = copy.deepcopy(d)
    for key in ("access_key", "secret_key", "connection_string", "account_key"):
        if masked.get(key) is not None:
            masked[key] = "********"
    return masked


def mask_config_dict(d: dict[str, Any]) -> dict[str, Any]:
    """A copy of an experiment config with storage credentials, the registry password and
    ``data.secrets`` values masked."""
    masked = copy.deepcopy(d)
    for key in ("checkpoint_storage", "tensorboard_storage"):
        if isinstance(masked.get(key), dict):
            masked[key] = mask_checkpoint_storage(masked[key])
    auth = (masked.get("environment") or {}).get("registry_auth")
    if isinstance(auth, dict) and auth.get("password") is not None:
        auth["password"] = "********"
    secrets = (masked.get("data") or {}).get("secrets")
    if isinstance(secrets, dict):
        for k in secrets:
            secrets[k] = "********"
    return masked
