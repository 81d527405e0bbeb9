"""Build a search method from the ``searcher:`` and ``hyperparameters:`` config sections.

Takes plain mappings (as parsed from YAML, defaulted or not) and fills the reference's defaults
for the fields it reads, so it works before and after config defaulting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined.errors import InvalidSearcherConfig
from determined.master.searcher._adaptive_asha import MODES, AdaptiveASHASearch, ASHASearch
from determined.master.searcher._custom import CustomSearch
from determined.master.searcher._grid import GridSearch
from determined.master.searcher._method import SearcherBase
from determined.master.searcher._random import RandomSearch, SingleSearch

_REMOVED = {
    "adaptive": "adaptive_asha",
    "adaptive_simple": "adaptive_asha",
    "sync_halving": "async_halving",
    "pbt": "adaptive_asha",
}
NAMES = ("single", "random", "grid", "async_halving", "adaptive_asha", "tpe")


def _int(cfg: Mapping[str, Any], key: str, *, default: Any = None, minimum: int = 0) -> int:
    name = cfg.get("name")
    value = cfg.get(key, default)
    if value is None:
        raise InvalidSearcherConfig(f"searcher {name!r} needs {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidSearcherConfig(
            f"searcher.{key} must be an integer >= {minimum}, got {value!r}"
        )
    return value


def _float(cfg: Mapping[str, Any], key: str, default: float) -> float:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSearcherConfig(f"searcher.{key} must be a number, got {value!r}")
    return float(value)


def max_length_units(cfg: Mapping[str, Any], *, minimum: int = 0) -> int:
    """``max_length`` as a unitless int (``{batches: N}`` etc. give ``N``); with the 0.38
    ``time_metric`` form, ``max_time``."""
    if cfg.get("time_metric") is not None or cfg.get("max_time") is not None:
        if cfg.get("time_metric") is None or cfg.get("max_time") is None:
            raise InvalidSearcherConfig(
                "searcher.time_metric and searcher.max_time go together; set both or neither"
            )
        return _int(cfg, "max_time", minimum=max(minimum, 1))
    raw = cfg.get("max_length")
    if isinstance(raw, Mapping):
        units = [k for k in ("batches", "records", "epochs") if k in raw]
        if len(units) != 1 or len(raw) != 1:
            raise InvalidSearcherConfig(
                f"searcher.max_length must name exactly one of batches, records or epochs, "
                f"got {dict(raw)!r}"
            )
        return _int(raw, units[0], minimum=max(minimum, 1))
    return _int(cfg, "max_length", minimum=minimum)


def optional_max_length(cfg: Mapping[str, Any]) -> int | None:
    """:func:`max_length_units`, or None when the config sets none of ``max_length``,
    ``time_metric`` and ``max_time``: 0.38 style, each trial decides its own length
    (``Trainer.fit(max_length=...)``) and ends by exiting 0. Only single, random and grid
    accept that; the ASHA family needs a length to place its rungs."""
    if all(cfg.get(k) is None for k in ("max_length", "time_metric", "max_time")):
        return None
    return max_length_units(cfg)


def _common(cfg: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(cfg.get("metric"), str):
        raise InvalidSearcherConfig(
            "searcher.metric (the validation metric to rank by) is required"
        )
    sib = cfg.get("smaller_is_better", True)
    if not isinstance(sib, bool):
        raise InvalidSearcherConfig(
            f"searcher.smaller_is_better must be true or false, got {sib!r}"
        )
    return {"smaller_is_better": sib}


def _asha_args(cfg: Mapping[str, Any]) -> dict[str, Any]:
    divisor = _float(cfg, "divisor", 4.0)
    if divisor <= 1:
        raise InvalidSearcherConfig(f"searcher.divisor must be greater than 1, got {divisor}")
    return {
        **_common(cfg),
        "max_length": max_length_units(cfg, minimum=1),
        "max_trials": _int(cfg, "max_trials", minimum=1),
        "divisor": divisor,
        "stop_once": bool(cfg.get("stop_once") or False),
        "max_concurrent_trials": _int(cfg, "max_concurrent_trials", default=16),
        "time_metric": cfg.get("time_metric"),
    }


def _adaptive_args(cfg: Mapping[str, Any]) -> dict[str, Any]:
    mode = cfg.get("mode", "standard")
    if mode not in MODES:
        raise InvalidSearcherConfig(
            f"searcher.mode must be one of {', '.join(MODES)}, got {mode!r}"
        )
    rungs = cfg.get("bracket_rungs") or []
    if not isinstance(rungs, list) or not all(isinstance(r, int) and r >= 1 for r in rungs):
        raise InvalidSearcherConfig(
            f"searcher.bracket_rungs must be positive integers, got {rungs!r}"
        )
    return {
        **_asha_args(cfg),
        "mode": mode,
        "max_rungs": _int(cfg, "max_rungs", default=5, minimum=1),
        "bracket_rungs": list(rungs),
    }


def make_search_method(
    searcher_config: Mapping[str, Any],
    hyperparameters: Mapping[str, Any] | None,
    experiment_seed: int,
) -> SearcherBase | CustomSearch:
    """The search method for an experiment.

    Called by the master once when an experiment is created (and by ``restore``). Pure: the
    same arguments always give a method that makes the same decisions.

    Raises:
        InvalidSearcherConfig: an unknown or removed searcher name, a missing or invalid field,
            an invalid hyperparameter, or a grid hyperparameter without ``count``.
    """
    cfg = searcher_config
    name = cfg.get("name")
    seed = int(experiment_seed)
    if name in _REMOVED:
        raise InvalidSearcherConfig(
            f"searcher {name!r} was removed in Determined 0.37; use {_REMOVED[name]!r} instead"
        )
    if name == "single":
        _common(cfg)
        return SingleSearch(max_length=optional_max_length(cfg), hparams=hyperparameters, seed=seed)
    if name == "random":
        _common(cfg)
        return RandomSearch(
            max_length=optional_max_length(cfg),
            max_trials=_int(cfg, "max_trials", minimum=1),
            max_concurrent_trials=_int(cfg, "max_concurrent_trials", default=16),
            hparams=hyperparameters,
            seed=seed,
        )
    if name == "grid":
        _common(cfg)
        if cfg.get("max_trials") is not None:
            raise InvalidSearcherConfig(
                "searcher.max_trials is not a grid field: a grid runs one trial per point; "
                "remove it (use `count` on each hyperparameter to size the grid)"
            )
        return GridSearch(
            max_length=optional_max_length(cfg),
            max_concurrent_trials=_int(cfg, "max_concurrent_trials", default=16),
            hparams=hyperparameters,
            seed=seed,
        )
    if name == "async_halving":
        args = _asha_args(cfg)
        num_rungs = _int(cfg, "num_rungs", minimum=1)
        return ASHASearch(**args, num_rungs=num_rungs, hparams=hyperparameters, seed=seed)
    if name == "adaptive_asha":
        return AdaptiveASHASearch(**_adaptive_args(cfg), hparams=hyperparameters, seed=seed)
    if name == "tpe":
        from determined.master.searcher._tpe import TPESearch

        return TPESearch.from_config(cfg, _asha_args(cfg), hyperparameters, seed)
    if name == "custom":
        return CustomSearch(seed)  # the runner outside the master decides
    raise InvalidSearcherConfig(f"searcher.name must be one of {', '.join(NAMES)}, got {name!r}")


def restore_search_method(
    searcher_config: Mapping[str, Any],
    hyperparameters: Mapping[str, Any] | None,
    snapshot: Mapping[str, Any],
) -> SearcherBase | CustomSearch:
    """The search method as it was when ``snapshot`` was taken (master restart)."""
    method = make_search_method(searcher_config, hyperparameters, int(snapshot["experiment_seed"]))
    method.load_snapshot(snapshot)
    return method
