"""Where trials run and what is left of them: the resource manager (a trial's runs as
processes, their logs) and checkpoint GC.

The app uses :class:`ResourceManager` (``LocalResourceManager``, or
``SlurmResourceManager`` for a Slurm cluster), :func:`collect_async` (GC when an experiment
ends) and the helpers its routers call.

Layering: imports ``experiment`` and ``store`` (and the master's top-level ``_errors``),
nothing above.
"""

from __future__ import annotations

from typing import Protocol

from determined.master.resources._gc import (
    Candidate,
    checkpoint_storage,
    collect_async,
    delete_checkpoints,
    delete_tensorboard_files,
    doomed_by,
    remove_checkpoint_files,
    select_deletions,
)
from determined.master.resources._launcher import check_bind_mounts
from determined.master.resources._local import LocalResourceManager
from determined.master.resources._log_retention import LogRetention
from determined.master.resources._recovery import resume_gc_async
from determined.master.resources._sandbox import Sandbox, SandboxError, configure_sandbox
from determined.master.resources._slurm import SlurmConfig, SlurmConfigError, SlurmResourceManager


class ResourceManager(Protocol):
    """What the app needs of a resource manager. It runs the trials of the app's
    ``Experiments`` (it subscribes to their events and reports exits back to them)."""

    def start(self) -> None:
        """Start running trials (the app serves); first close runs a previous master left."""

    def terminate_all(self) -> None:
        """Signal every run to stop (the master is stopping); :meth:`stop` follows."""

    def stop(self) -> None:
        """Stop running trials; no trial process outlives the master."""

    def capacity(self) -> int:
        """The most slots one trial can ever get here (a larger ``slots_per_trial`` would wait
        forever: experiment creation refuses it)."""

    def drop_environment(self, experiment_id: int) -> None:
        """Forget what the experiment's runs needed on the nodes (it was deleted): here, its
        Python environment."""


__all__ = [
    "LogRetention",
    "Candidate",
    "LocalResourceManager",
    "ResourceManager",
    "Sandbox",
    "SandboxError",
    "SlurmConfig",
    "SlurmConfigError",
    "SlurmResourceManager",
    "check_bind_mounts",
    "checkpoint_storage",
    "collect_async",
    "configure_sandbox",
    "delete_checkpoints",
    "remove_checkpoint_files",
    "delete_tensorboard_files",
    "doomed_by",
    "resume_gc_async",
    "select_deletions",
]
