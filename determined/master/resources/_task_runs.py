"""The non-trial tasks' runs (commands, notebooks, shells, TensorBoards, generic tasks:
docs/tasks.md) in the resource manager: started as process groups here (a Slurm backend
submits its own), reaped, ended, killed on request or on a disabled agent, and those a
previous master ran ended."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from determined.master.resources import _envs, _identity, _launcher, _recovery, _sandbox, _tasks
from determined.master.resources._backend import STOP_GRACE_S, Run, resources_stopped_line
from determined.master.resources._log_capture import LogSink
from determined.master.store import _tasks as _task_rows
from determined.master.store import _users

if TYPE_CHECKING:
    from determined.master.resources._manager import Manager

logger = logging.getLogger("determined.master")


class TaskRuns:
    """The running tasks of a :class:`~_manager.Manager` (``runs``: task id -> its run)."""

    def __init__(self, manager: Manager) -> None:
        self._m = manager
        self.runs: dict[str, Run] = {}

    def identity(self, task: dict[str, Any]) -> _identity.Identity | None:
        """Whom ``task`` runs as (its owner, in its workspace); raises LaunchError when the
        sandbox refuses its owner."""
        with self._m.store.read() as conn:
            self._m.check_owner(conn, int(task["owner_id"]))
            workspace = (task.get("data") or {}).get("workspaceId")
            return self._m.identity_of(conn, int(task["owner_id"]), workspace)

    def end_stale(self, keep: Collection[str] = ()) -> None:
        """Tasks a previous master ran are over (but those in ``keep``, adopted): their
        processes are killed, rows ended."""
        with self._m.store.read() as conn:
            stale = [
                t
                for t in _task_rows.live(conn)
                if t["state"] == "RUNNING" and str(t["id"]) not in keep
            ]
        stale_ids = [str(t["allocation_id"]) for t in stale]
        for pid in _recovery.kill_leftovers(stale_ids, self._m.store.cluster_id):
            logger.warning("killed task process %d left running by a previous master", pid)
        with self._m.store.tx() as conn:
            for task in stale:
                _task_rows.terminate(conn, str(task["id"]), "the master restarted")
                _users.revoke_allocation_tokens(conn, str(task["allocation_id"]))

    def launch(self, task: dict[str, Any], slots: list[int]) -> bool:
        """Start ``task`` as a process group here; False (the task ended as failed to start)
        if it cannot be."""
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        # Held: the process's first lines come after the "have started" note below.
        sink = LogSink(self._m.logs, task_id, allocation_id, held=True)
        work_dir = self._m.work_root / allocation_id
        try:
            identity = self.identity(task)
            launch = self.prepare(task, work_dir, slots)
            for sockets in _tasks.socket_dirs(launch.ports):
                if identity is not None:  # its service makes the socket there, as them
                    os.chown(sockets, identity.uid, identity.gid)
            wrap = self._m.sandbox_for(
                task["config"] or {},
                work_dir,
                _envs.task_env_dir(self._m.env_root, task_id),
                read_only=list(((task.get("data") or {}).get("logdirs") or {}).values()),
                caps=_sandbox.SSHD_CAPS if task["type"] == "SHELL" else (),
                groups=_identity.tty_groups() if task["type"] == "SHELL" else (),
                writable=_tasks.socket_dirs(launch.ports),  # a notebook's or TensorBoard's socket
                identity=identity,
                net=self._m.private_net(allocation_id, task["config"] or {}, launch.env),
            )
            hook = self._m.startup_hook_of(task["config"] or {})
            proc = _launcher.TrialProcess(launch.argv, work_dir, launch.env, sink, wrap, hook)
        except Exception as e:
            sink.release()
            self.not_started(task, sink, work_dir, e)
            return False
        with self._m.store.tx() as conn:
            _task_rows.set_running(conn, task_id, allocation_id, launch.ports)
        run = Run([proc], sink, slots, STOP_GRACE_S, allocation_id=allocation_id)
        self.runs[task_id] = run
        sink.master(
            f"Resources for {task['description']} have started "
            f"(slots {slots}, pid {proc.pid}, ports {launch.ports})"
        )
        sink.release()
        return True

    def prepare(self, task: dict[str, Any], work_dir: Path, slots: list[int]) -> _tasks.TaskLaunch:
        """The task's token, environment and work dir, and what it runs (``_tasks.prepare``)."""
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        with self._m.store.tx() as conn:
            token = _users.issue_token(
                conn, int(task["owner_id"]), kind="user", allocation_id=allocation_id
            )
            owner = str(_users.require_user(conn, int(task["owner_id"]))["username"])
        environment = _envs.ensure_task(self._m.env_root, task_id)
        return _tasks.prepare(
            task,
            work_dir,
            environment=environment,
            master_url=self._m.master_url,
            cluster_id=self._m.store.cluster_id,
            allocation_id=allocation_id,
            token=token,
            owner=owner,
            slot_ids=slots,
            gpu=self._m.gpu,
        )

    def not_started(
        self, task: dict[str, Any], sink: LogSink, work_dir: Path, e: Exception
    ) -> None:
        """The task could not be started: say why in its log and end it, leaving nothing."""
        task_id = str(task["id"])
        if not isinstance(e, _launcher.LaunchError):
            logger.exception("launching task %s failed", task_id)
        sink.master(f"crashed: {_launcher.describe(e)}")
        self._m.logs.flush()
        shutil.rmtree(work_dir, ignore_errors=True)
        _envs.remove_task(self._m.env_root, task_id)
        with self._m.store.tx() as conn:
            _task_rows.terminate(conn, task_id, f"failed to start: {_launcher.describe(e)}")
            _users.revoke_allocation_tokens(conn, _task_rows.allocation_of(task))

    def reap(self) -> None:
        for task_id, run in list(self.runs.items()):
            code = run.exit_code()
            if code is None:
                continue
            del self.runs[task_id]
            run.finish()
            if not run.killed:
                run.sink.master(resources_stopped_line(code))
            status = "killed" if run.killed else f"exited with code {code}"
            self.ended(task_id, run, status)

    def ended(self, task_id: str, run: Run, status: str) -> None:
        self._m.free.extend(s for s in run.slots if s not in self._m.free)
        # The last line goes out before the task is seen to end (a reader of its log then
        # has it all).
        with self._m.store.read() as conn:
            row = _task_rows.get(conn, task_id)
        pausing = row is not None and (row["data"] or {}).get("pause_requested")
        run.sink.master(f"task {task_id} {'paused' if pausing else status}")
        self._m.logs.flush()
        with self._m.store.tx() as conn:
            _task_rows.end_run(conn, task_id, status)  # PAUSED when a pause stopped it
            _users.revoke_allocation_tokens(conn, run.allocation_id)
        for proc in run.procs:
            shutil.rmtree(proc.work_dir, ignore_errors=True)
        for sockets in _tasks.socket_dirs(row["ports"] if row is not None else None):
            shutil.rmtree(sockets, ignore_errors=True)
        self._m.sandbox.drop_services(run.allocation_id)
        _envs.remove_task(self._m.env_root, task_id)

    def _on_disabled(self) -> set[str]:
        """The running tasks on a slot or agent disabled without draining (killed, as 0.37
        kills the containers there)."""
        agents, _ = self._m.toggles()
        _, doomed_slots = self._m.slot_blocks()
        doomed_agents = {a for a, t in agents.items() if not t.enabled and not t.draining}
        return {
            task_id
            for task_id, run in self.runs.items()
            if doomed_slots.intersection(run.slots) or run.agent in doomed_agents
        }

    def enforce(self) -> None:
        """Kill the tasks whose kill (or pause) was asked for, and those whose row ended while
        they were being started (a kill of a QUEUED task ends it at once): SIGTERM, then SIGKILL
        after a grace."""
        with self._m.store.read() as conn:
            live = {str(t["id"]): t for t in _task_rows.live(conn)}
        doomed = {task_id for task_id, t in live.items() if t["kill_requested"]}
        doomed |= {task_id for task_id in self.runs if task_id not in live}
        disabled = self._on_disabled() - doomed if self.runs else set()
        now = time.monotonic()
        for task_id in (doomed | disabled) & set(self.runs):
            run = self.runs[task_id]
            if run.preempted_at is None:
                run.preempted_at = now
                run.killed = True
                pausing = ((live.get(task_id) or {}).get("data") or {}).get("pause_requested")
                why = "stopping the task to pause it" if pausing else "killing the task"
                cause = "its agent or slot was disabled" if task_id in disabled else None
                run.sink.master(f"{why} ({cause or 'requested by a user'})")
                run.signal(signal.SIGTERM)
            elif now - run.preempted_at > run.timeout_s:
                run.signal(signal.SIGKILL)
