"""What the resource manager (``_manager.Manager``) runs and what it asks of its backend.

A :class:`Run` is one allocation's processes, whatever runs them: local process groups
(``_launcher.TrialProcess``) or a Slurm job (``_slurm_jobs.SlurmJob``), each a
:class:`Process`. A :class:`Backend` decides where a run goes and how it starts, is killed
and is found again after a restart: ``_local.LocalBackend`` or ``_slurm.SlurmBackend``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Protocol

from determined.master.resources._log_capture import LogSink
from determined.master.store import TrialRow

STOP_GRACE_S = 3.0  # what a run gets to exit after SIGTERM when the master or its task stops


def resources_stopped_line(code: int) -> str:
    """0.37's last log line of an allocation that ended by itself (its e2e tests and users grep
    for these words)."""
    if code == 0:
        return "resources exited successfully with a zero exit code"
    return (
        "crashed: resources failed with non-zero exit code: container failed "
        f"with non-zero exit code: {code} (exit code {code})"
    )


class Process(Protocol):
    """What runs a container: a local process group (``_launcher.TrialProcess``) or a Slurm
    job (``_slurm_jobs.SlurmJob``)."""

    pid: int
    work_dir: Path

    def poll(self) -> int | None: ...

    def signal_group(self, sig: int = ...) -> None: ...

    def finish(self, timeout: float = 5.0) -> None: ...


@dataclasses.dataclass
class Run:
    """One allocation: a process per container (one, unless it spans agents)."""

    procs: list[Process]
    sink: LogSink
    slots: list[int]
    timeout_s: float
    port_offset: int = 0
    preempted_at: float | None = None
    killed: bool = False
    allocation_id: str = ""  # a task's (trials' runs are keyed by theirs)
    agent: str = ""  # the agent a task without slots was placed on
    # A Slurm job: it keeps running when the master stops (the next master adopts it).
    detached: bool = False

    def exit_code(self) -> int | None:
        """None while any container runs; else the first non-zero code, or 0."""
        codes = [p.poll() for p in self.procs]
        if any(c is None for c in codes):
            return None
        return next((c for c in codes if c), 0)

    def failed_container(self) -> bool:
        return any(p.poll() not in (None, 0) for p in self.procs)

    def signal(self, sig: int) -> None:
        for p in self.procs:
            p.signal_group(sig)

    def finish(self, timeout: float = 5.0) -> None:
        for p in self.procs:
            p.finish(timeout)


class Backend(Protocol):
    """Where and how runs start and stop; handed its :class:`Manager` when built."""

    gpu: bool  # slots are GPUs

    def recover(self) -> None:
        """At start, before the loop: close or adopt what a previous master left running, and
        end the tasks it ran (:meth:`_task_runs.TaskRuns.end_stale`)."""

    def poll(self) -> None:
        """At each tick, before the runs are reaped: refresh what their exit codes come from."""

    def plan(self) -> None:
        """Before a tick's trials are started: read which agents take no new work."""

    def run_trial(self, trial: TrialRow, need: int) -> None:
        """Start a run of ``trial`` on ``need`` slots if they can be had now (else it waits)."""

    def schedule_tasks(self) -> None:
        """Start the queued non-trial tasks it can."""

    def kill(self, allocation_id: str, run: Run) -> None:
        """Kill a trial's run (it is marked killed and its log says why already)."""

    def doomed(self) -> set[str]:
        """The allocations running where an agent or slot was disabled without draining."""

    def occupancy(self) -> dict[int, str]:
        """Slot -> the id of the allocation running on it, for the slots in use now."""

    def capacity(self) -> int:
        """The most slots one trial can ever get."""

    def knows_pool(self, name: str) -> bool:
        """Whether ``name`` is one of its resource pools."""

    def task_refusal(self, kind: str) -> str | None:
        """Why it cannot run a task of ``kind``, or None."""
