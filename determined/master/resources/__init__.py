"""Where trials run and what is left of them: the resource manager (a trial's runs as
processes, their logs) and checkpoint GC.

The app uses :class:`ResourceManager` (``LocalResourceManager``, or
``SlurmResourceManager`` for a Slurm cluster: each one ``_manager.Manager``, the loop, over its
``_manager.Backend``, local process groups or Slurm jobs), :func:`collect_async` (GC when an
experiment ends) and the helpers its routers call.

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
from determined.master.resources._slurm import SlurmResourceManager
from determined.master.resources._slurm_jobs import SlurmConfig, SlurmConfigError
from determined.master.store._agent_states import Toggle


class ResourceManager(Protocol):
    """What the app needs of a resource manager. It runs the trials of the app's
    ``Experiments`` (it subscribes to their events and reports exits back to them) and the
    tasks of ``store._tasks``; the routers read its slots and agents through it."""

    # Its slots (GPU indices, or CPU slot numbers), split into agents (``agent_ids[i]`` has
    # ``agents[i]``), whether they are GPUs, and when it started (the agents' registration).
    @property
    def slots(self) -> list[int]: ...

    @property
    def agents(self) -> list[list[int]]: ...

    @property
    def agent_ids(self) -> list[str]: ...

    @property
    def gpu(self) -> bool: ...

    @property
    def started_at(self) -> float: ...

    def start(self) -> None:
        """Start running trials (the app serves); first close runs a previous master left."""

    def terminate_all(self) -> None:
        """Signal every run to stop (the master is stopping); :meth:`stop` follows."""

    def stop(self) -> None:
        """Stop running trials; no trial process outlives the master."""

    def wake(self) -> None:
        """Look at the queue now (a task was created or asked to stop, an agent or slot
        changed state, the queue was reordered), not at the next tick."""

    def capacity(self) -> int:
        """The most slots one trial can ever get here (a larger ``slots_per_trial`` would wait
        forever: experiment creation refuses it)."""

    def knows_pool(self, name: str) -> bool:
        """Whether ``name`` is one of its resource pools."""

    def task_refusal(self, kind: str) -> str | None:
        """Why it cannot run a task of ``kind`` (``COMMAND``, ``NOTEBOOK``, ...), or None."""

    def occupancy(self) -> dict[int, str]:
        """Slot -> the id of the allocation running on it, for the slots in use now."""

    def toggles(self) -> tuple[dict[str, Toggle], dict[int, Toggle]]:
        """``(agents, slots)``: each agent's and each slot's state as an admin set it."""

    def slot_blocks(self) -> tuple[set[int], set[int]]:
        """``(blocked, doomed)``: the slots that take no new work, and those of them whose
        running work is killed (disabled, not draining)."""

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
