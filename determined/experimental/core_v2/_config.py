"""``Config`` and its two deprecated halves, ``DefaultConfig`` and ``UnmanagedConfig``, as in
0.37: what an unmanaged experiment is called and how it is found again."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any


@dataclasses.dataclass
class Config:
    """The unmanaged experiment's settings (ignored in a trial the master launched).

    ``external_experiment_id`` names the experiment so that another run (or another trial of
    a search) finds it again; ``external_trial_id`` names the trial within it so that a rerun
    resumes it from its latest checkpoint. Give both to resume; ``external_trial_id`` alone is
    an error.
    """

    name: str | None = None
    hparams: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    description: str | None = None
    labels: list[str] | None = None
    workspace: str | None = None
    project: str | None = None
    checkpoint_storage: str | dict[str, Any] | None = None
    # The searcher section (e.g. its metric, for sorting in the web UI); default: single.
    searcher: dict[str, Any] | None = None
    external_experiment_id: str | None = None
    external_trial_id: str | None = None


@dataclasses.dataclass
class DefaultConfig(Config):
    """Deprecated in 0.37 (use :class:`Config`); still accepted."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn(
            "DefaultConfig is deprecated; use core_v2.Config (the same fields)",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__(**kwargs)


@dataclasses.dataclass
class UnmanagedConfig(Config):
    """Deprecated in 0.37 (use :class:`Config`); still accepted."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn(
            "UnmanagedConfig is deprecated; use core_v2.Config (the same fields)",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__(**kwargs)


def merge(
    config: Config | None, defaults: Config | None, unmanaged: Config | None
) -> Config | None:
    """0.37's rule: ``config`` wins outright; else ``defaults`` with the identifying fields of
    ``unmanaged`` filled in where ``defaults`` has none; else ``unmanaged``."""
    if config is not None:
        return config
    if defaults is None:
        return unmanaged
    if unmanaged is not None:
        for key in ("workspace", "project", "external_experiment_id", "external_trial_id"):
            if getattr(defaults, key) is None:
                setattr(defaults, key, getattr(unmanaged, key))
    return defaults
