"""``det.ExperimentConfig``: an experiment config dict with the accessors legacy trial code calls.

The config a trial receives from our master has every default filled in; these accessors still
fall back to the defaults so that a partial config (local runs, tests) works too. The defaults
are the config model's (``determined.common.expconf.default``), never written out here.
"""

from __future__ import annotations

from typing import Any


def _default(path: str) -> Any:
    from determined.common import expconf  # pydantic: only legacy code that reads one pays

    return expconf.default(path)


def _get(section: Any, key: str, path: str) -> Any:
    """``section[key]`` of a partial config, else the model's default for ``path``."""
    value = section.get(key) if isinstance(section, dict) else None
    return _default(path) if value is None else value


class ExperimentConfig(dict):
    """A ``dict`` (the experiment config) with read helpers."""

    def debug_enabled(self) -> bool:
        return bool(_get(self, "debug", "debug"))

    def scheduling_unit(self) -> int:
        return int(self.get("scheduling_unit") or _default("scheduling_unit"))

    def native_parallel_enabled(self) -> bool:
        resources = self.get("resources")
        return bool(_get(resources, "native_parallel", "resources.native_parallel"))

    def average_training_metrics_enabled(self) -> bool:
        path = "optimizations.average_training_metrics"
        return bool(_get(self.get("optimizations"), "average_training_metrics", path))

    def slots_per_trial(self) -> int:
        resources = self.get("resources")
        return int(_get(resources, "slots_per_trial", "resources.slots_per_trial"))

    def experiment_seed(self) -> int:
        return int((self.get("reproducibility") or {}).get("experiment_seed") or 0)

    def profiling_enabled(self) -> bool:
        return bool(_get(self.get("profiling"), "enabled", "profiling.enabled"))

    def profiling_interval(self) -> tuple[int, int | None]:
        if not self.profiling_enabled():
            return 0, 0
        profiling = self["profiling"]
        begin = _get(profiling, "begin_on_batch", "profiling.begin_on_batch")
        return int(begin), profiling.get("end_after_batch")

    def profiling_sync_timings(self) -> bool:
        return bool(_get(self.get("profiling"), "sync_timings", "profiling.sync_timings"))

    def get_records_per_epoch(self) -> int | None:
        value = self.get("records_per_epoch")
        return int(value) if value is not None else None

    def get_min_validation_period(self) -> dict[str, Any]:
        return _period(self, "min_validation_period")

    def get_min_checkpoint_period(self) -> dict[str, Any]:
        return _period(self, "min_checkpoint_period")

    def get_searcher_metric(self) -> str:
        metric = (self.get("searcher") or {}).get("metric")
        if not isinstance(metric, str):
            raise ValueError(
                f"searcher.metric must be a string in the experiment config: {metric!r}"
            )
        return metric

    def get_optimizations_config(self) -> dict[str, Any]:
        return dict(self.get("optimizations") or {})

    def get_checkpoint_storage(self) -> dict[str, Any]:
        return dict(self.get("checkpoint_storage") or {})

    def get_entrypoint(self) -> str | list[str]:
        entrypoint = self.get("entrypoint")
        if isinstance(entrypoint, str) or (
            isinstance(entrypoint, list) and all(isinstance(e, str) for e in entrypoint)
        ):
            return entrypoint
        raise ValueError(
            f"the experiment config's entrypoint must be a string or a list of strings: "
            f"{entrypoint!r}"
        )


def _period(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a mapping like {{batches: 100}}, not {value!r}")
    return value
