"""The resource manager: one loop over the runs of trials and tasks, whatever runs them.

:class:`Manager` holds what every cluster shares: the runs, the exits not yet recorded, the
agents and slots the API shows (and an admin disables), the tasks' lifecycle and the stop. Its
:class:`Backend` decides the rest: where a run goes and how it starts, is killed and is found
again after a restart: local process groups (``_local.LocalBackend``) or Slurm jobs
(``_slurm.SlurmBackend``).

One thread does everything, on a short tick or when an experiment event wakes it: reap exited
runs (-> :meth:`Experiments.allocation_exited`), enforce kills and the preemption timeout, then
start the runnable trials (in the job queue's order, ``_queue``) and the queued tasks.

Agents and slots an admin disabled (``store._agent_states``, read each tick) take no new work;
work running on one disabled without draining is killed (the trial runs again elsewhere, no
restart counted), as 0.37 kills the containers of an agent disabled without ``--drain``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

from determined.master._errors import ApiError
from determined.master.experiment import Experiments, State
from determined.master.resources import (
    _envs,
    _identity,
    _launcher,
    _queue,
    _recovery,
    _sandbox,
    _tasks,
)
from determined.master.resources._log_capture import LogHook, LogSink, LogWriter
from determined.master.store import (
    AllocationRow,
    Store,
    TrialRow,
    _agent_states,
    _experiments,
    _trials,
    _users,
)
from determined.master.store import _tasks as _task_rows

logger = logging.getLogger("determined.master")
TICK_S = 0.5
STOP_GRACE_S = 3.0
# Why a run is asked to stop, by its trial's state (else a pause or a searcher's stop).
_STOP_REASONS = {
    State.STOPPING_COMPLETED.value: "the trial's work is done",
    State.STOPPING_CANCELED.value: "canceled",
}


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
        end the tasks it ran (:meth:`Manager.end_stale_tasks`)."""

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


class Manager:
    """Runs the trials of ``experiments`` (call :meth:`start` once the app serves), and the
    non-trial tasks of ``store._tasks`` (commands, notebooks, ...: docs/tasks.md), through its
    ``backend`` (set by whoever builds it, before :meth:`start`).

    Args:
        master_url: what trials use as ``DET_MASTER``.
        work_root: runs get ``<work_root>/<allocation id>`` as their work dir (removed after).
        log_hook: called with each batch of the runs' log lines, inside the transaction that
            stores them (webhooks match task-log patterns there).
        sandbox: every trial and task process starts inside it (``_sandbox``); None: none.
    """

    backend: Backend

    def __init__(
        self,
        store: Store,
        experiments: Experiments,
        *,
        master_url: str,
        work_root: Path,
        log_hook: LogHook | None = None,
        sandbox: _sandbox.Sandbox | None = None,
    ) -> None:
        self.store = store
        self.sandbox = sandbox or _sandbox.Sandbox("none", None, "task_isolation: none")
        self.exps = experiments
        self.master_url = master_url
        self.work_root = work_root
        # The experiments' Python environments (``_envs``), beside the work dirs.
        self.env_root = work_root.parent / "envs"
        # The agents (each a list of slots) the API shows; the backend sets them.
        self.slots: list[int] = []
        self.agents: list[list[int]] = []
        self.agent_ids: list[str] = []
        self.free: list[int] = []  # slots no run holds
        self.started_at = time.time()
        self.runs: dict[str, Run] = {}  # a trial's, by allocation id
        # Non-trial tasks (commands, notebooks, ...): task id -> its run.
        self.task_runs: dict[str, Run] = {}
        # Exits not yet recorded (the store failed, e.g. a full disk): ``allocation id ->
        # (exit code, killed)``, retried every tick until written.
        self.exits: dict[str, tuple[int, bool]] = {}
        self._warned: set[int] = set()
        self._wake = threading.Event()
        self.stopping = threading.Event()
        self.logs = LogWriter(store, log_hook)
        self._thread = threading.Thread(target=self._loop, name="resource-manager", daemon=True)
        experiments.subscribe(on_change=self._wake.set)

    @property
    def gpu(self) -> bool:
        return self.backend.gpu

    def start(self) -> None:
        """Close or adopt what a previous master left (no restart counted), then schedule."""
        self.backend.recover()
        self._thread.start()

    def knows_pool(self, name: str) -> bool:
        return self.backend.knows_pool(name)

    def task_refusal(self, kind: str) -> str | None:
        """Why it cannot run a task of ``kind`` (the API refuses to queue one), or None."""
        return self.backend.task_refusal(kind)

    def capacity(self) -> int:
        return self.backend.capacity()

    def occupancy(self) -> dict[int, str]:
        return self.backend.occupancy()

    def wake(self) -> None:
        """Run a scheduling tick now, not on the next one (a task was created or asked to stop,
        an agent or slot changed state, the queue was reordered)."""
        self._wake.set()

    def drop_environment(self, experiment_id: int) -> None:
        """Delete an experiment's environment (the experiment is deleted)."""
        _envs.remove(self.env_root, experiment_id)

    def terminate_all(self) -> None:
        """SIGTERM every run that must not outlive the master (all but Slurm's jobs, which a
        restarted master adopts); :meth:`stop` follows."""
        self.stopping.set()
        for run in [*self.runs.values(), *self.task_runs.values()]:
            if not run.detached:
                run.signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop scheduling and make sure no process of a run outlives the master: give them up
        to :data:`STOP_GRACE_S` to exit, reap them, record the end of their tasks."""
        self.terminate_all()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for run in [*self.runs.values(), *self.task_runs.values()]:
            if run.detached:
                run.finish()  # the output it wrote so far
        runs = [r for r in [*self.runs.values(), *self.task_runs.values()] if not r.detached]
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(r.exit_code() is None for r in runs):
            time.sleep(0.05)
        for run in runs:
            run.finish(timeout=1.0)
        for task_id, run in list(self.task_runs.items()):
            if run.detached:
                continue
            try:
                self._task_ended(task_id, self.task_runs.pop(task_id), "the master stopped")
            except Exception:  # the store is going too: the next master ends it
                logger.exception("cannot record the end of task %s", task_id)
        self.logs.close()

    # ------------------------------------------------------------------- the loop

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            if self.stopping.is_set():
                return
            # Each step guards its own items too: one bad trial never stalls the others.
            steps = (
                self._reap,
                self.record_exits,
                self._enforce,
                self._reap_tasks,
                self._enforce_tasks,
                self.backend.schedule_tasks,
                self._schedule,
            )
            for step in steps:
                try:
                    step()
                except Exception:  # keep scheduling whatever one event did
                    logger.exception("resource manager tick failed in %s", step.__name__)

    def _reap(self) -> None:
        self.backend.poll()
        for allocation_id, run in list(self.runs.items()):
            code = run.exit_code()
            if code is None:
                if run.failed_container() and not run.killed:
                    # One container of a multi-container run failed: the rest cannot finish.
                    self.kill(allocation_id, run, "another container of the trial failed")
                continue
            del self.runs[allocation_id]
            self.free.extend(run.slots)
            self.exits[allocation_id] = (code, run.killed)
            run.finish()
            if not run.killed:
                run.sink.master(resources_stopped_line(code))
            run.sink.master(f"allocation {allocation_id} exited with code {code}")
            self.logs.flush()
            for proc in run.procs:
                shutil.rmtree(proc.work_dir, ignore_errors=True)
            self.sandbox.drop_services(allocation_id)

    def record_exits(self) -> None:
        """Tell the experiment domain about every exit not recorded yet; one that cannot be
        written now (a full disk) stays pending for the next tick, so a trial never waits in
        a STOPPING state for an exit the master saw but lost."""
        for allocation_id, (code, killed) in list(self.exits.items()):
            try:
                self.exps.allocation_exited(allocation_id, code, killed=killed, excluded_waits=True)
            except Exception as e:  # the store, most likely: retried on the next tick
                logger.warning("cannot record the exit of %s yet (%r); retrying", allocation_id, e)
                continue
            del self.exits[allocation_id]

    def _enforce(self) -> None:
        """Kill runs of killed trials at once and preempted ones after their timeout."""
        with self.store.read() as conn:
            rows = {str(a["id"]): a for a in _trials.live_allocations(conn)}
        now = time.monotonic()
        doomed = self.backend.doomed() if self.runs else set()
        for allocation_id, run in list(self.runs.items()):
            row = rows.get(allocation_id)
            if row is None or run.killed:
                continue
            if row["trial_state"] == State.STOPPING_KILLED.value:
                self.kill(allocation_id, run, "killed")
            elif allocation_id in doomed:
                self.kill(allocation_id, run, "its agent or slot was disabled")
            elif row["preempted"] and run.preempted_at is None:
                run.preempted_at = now
                reason = _STOP_REASONS.get(str(row["trial_state"]), "preempted")
                run.sink.master(
                    f"gracefully terminating allocation's remaining resources (reason: {reason})"
                )
            elif run.preempted_at is not None and now - run.preempted_at > run.timeout_s:
                self.kill(allocation_id, run, "preemption timeout")

    def kill(self, allocation_id: str, run: Run, reason: str) -> None:
        """Kill a trial's run, once, the backend's way."""
        if run.killed:
            return
        run.sink.master(f"forcibly killing allocation's remaining resources (reason: {reason})")
        run.killed = True
        self.backend.kill(allocation_id, run)
        self._wake.set()

    def _schedule(self) -> None:
        with self.store.read() as conn:
            runnable = _queue.runnable_in_order(conn)
        if runnable:
            self.backend.plan()
        for trial in runnable:
            if self.stopping.is_set():
                return
            try:
                need = self._slots_needed(trial)
            except Exception:  # its experiment's row, say: the other trials still start
                logger.exception("cannot schedule trial %s", trial["id"])
                continue
            if need is not None:
                self.backend.run_trial(trial, need)

    def _slots_needed(self, trial: TrialRow) -> int | None:
        with self.store.read() as conn:
            exp = _experiments.require_experiment(conn, trial["experiment_id"])
        wanted = int((exp["config"].get("resources") or {}).get("slots_per_trial", 1))
        need = max(wanted, 1)
        if need > len(self.slots):
            if trial["id"] not in self._warned:
                self._warned.add(trial["id"])
                logger.warning(
                    "trial %s needs %d slots; this master has %d: it stays queued",
                    trial["id"],
                    need,
                    len(self.slots),
                )
            return None
        return need

    # ------------------------------------------------------------ agents and slots

    def toggles(self) -> tuple[dict[str, _agent_states.Toggle], dict[int, _agent_states.Toggle]]:
        """``(agents, slots)``: each agent's and each slot's own state as an admin set it
        (enabled unless disabled)."""
        with self.store.read() as conn:
            states = _agent_states.all_states(conn)
        default = _agent_states.Toggle()
        agents = {a: states.get((a, _agent_states.AGENT), default) for a in self.agent_ids}
        slots = {
            slot: states.get((agent_id, str(slot)), default)
            for agent_id, agent_slots in zip(self.agent_ids, self.agents, strict=True)
            for slot in agent_slots
        }
        return agents, slots

    def slot_blocks(self) -> tuple[set[int], set[int]]:
        """``(blocked, doomed)``: the slots that take no new work (their agent or they are
        disabled), and those of them whose running work is killed (disabled, not draining)."""
        agents, slots = self.toggles()
        blocked, doomed = set(), set()
        for agent_id, agent_slots in zip(self.agent_ids, self.agents, strict=True):
            for slot in agent_slots:
                for toggle in (agents[agent_id], slots[slot]):
                    if not toggle.enabled:
                        blocked.add(slot)
                        if not toggle.draining:
                            doomed.add(slot)
        return blocked, doomed

    def agent_blocks(self) -> tuple[set[str], set[str]]:
        """``(blocked, doomed)`` agents, whole: those that take no new work (the agent or a slot
        of it disabled: Slurm places whole nodes), and those whose running work is killed
        (disabled without draining)."""
        agents, slots = self.toggles()
        blocked, doomed = set(), set()
        for agent_id, agent_slots in zip(self.agent_ids, self.agents, strict=True):
            for toggle in [agents[agent_id], *(slots[s] for s in agent_slots)]:
                if not toggle.enabled:
                    blocked.add(agent_id)
                    if not toggle.draining:
                        doomed.add(agent_id)
        return blocked, doomed

    # ------------------------------------------------------------ launching

    def allocate(
        self, trial_id: int, resources: list[dict[str, Any]]
    ) -> tuple[AllocationRow, str] | None:
        """A new allocation of the trial and its token; None when it cannot run now."""
        try:
            return self.exps.allocate(trial_id, resources)
        except ApiError:
            return None  # it changed since the read (paused, killed): not runnable now
        except Exception:  # the store failed (a full disk): try again on a later tick
            logger.exception("cannot allocate trial %s", trial_id)
            return None

    def launch_spec(
        self, alloc: AllocationRow, token: str, containers: list[list[int]]
    ) -> tuple[_launcher.LaunchSpec, _identity.Identity | None]:
        """What a new run of ``alloc`` is (a free port offset its own) and whom it runs as.
        Raises LaunchError when the sandbox refuses its owner."""
        with self.store.read() as conn:
            spec = _launcher.launch_spec(conn, alloc, token, containers, self.gpu)
            owner = _experiments.owner_of(conn, spec.experiment_id)
            self.check_owner(conn, owner)
            workspace = _identity.experiment_workspace(conn, spec.experiment_id)
            identity = self.identity_of(conn, owner, workspace)
        spec.port_offset = _launcher.pick_port_offset({r.port_offset for r in self.runs.values()})
        return spec, identity

    def launch_failed(self, allocation_id: str, sink: LogSink, e: Exception) -> None:
        """A trial's run could not be started: its log says why and it exits 1."""
        if not isinstance(e, _launcher.LaunchError):
            logger.exception("launching allocation %s failed", allocation_id)
        sink.master(f"crashed: {_launcher.describe(e)}")
        self.logs.flush()
        self.exits[allocation_id] = (1, False)
        self.record_exits()

    def check_owner(self, conn: sa.Connection, owner_id: int) -> None:
        """Raises LaunchError when the sandbox setting refuses to run the user's tasks here
        (``_sandbox.Sandbox.refusal``: no sandbox, several users)."""
        user = _users.get_user(conn, owner_id) or {"username": f"user {owner_id}", "admin": False}
        refusal = self.sandbox.refusal(str(user["username"]), bool(user["admin"]))
        if refusal is not None:
            raise _launcher.LaunchError(refusal)

    def sandbox_for(
        self,
        config: Any,
        work_dir: Path,
        environment: Path,
        read_only: Collection[str] = (),
        caps: Collection[str] = (),
        chdir: bool = True,
        writable: Collection[str | Path] = (),
        identity: _identity.Identity | None = None,
        net: _sandbox.PrivateNet | None = None,
        groups: Collection[int] = (),
    ) -> Callable[[list[str]], list[str]]:
        """What wraps a process of ``config`` (a task's or an experiment's) in the sandbox:
        its work dir, storage paths and ``writable`` writable, its environment read-only;
        ``chdir``: start in the work dir (else where it was started); ``identity``: the OS
        user it runs as (its work dir becomes theirs, ``_identity``); ``net``: its own
        network namespace (a process with ``proxy_ports``); ``groups``: the identity's
        supplementary groups (a shell's: ``tty``)."""
        storage, mounts = _sandbox.storage_paths(config)
        accounts = None
        per_rank = False
        if identity is not None:
            _identity.hand_over(identity, work_dir, environment)
            self.sandbox.open_storage(storage, identity)
            accounts = _identity.account_files(identity, work_dir / ".det-accounts", work_dir)
            per_rank = not chdir  # a Slurm job's: the identity enters work/<rank> itself
        _sandbox.make_paths(storage)
        return functools.partial(
            self.sandbox.wrap,
            writable=[work_dir, *storage, *writable],
            read_only=[environment, *mounts, *read_only],
            caps=list(caps),
            chdir=work_dir if chdir or identity is not None else None,
            identity=identity,
            accounts=accounts,
            per_rank=per_rank,
            net=net,
            groups=list(groups),
        )

    def identity_of(
        self, conn: sa.Connection, owner_id: int, workspace_id: int | None
    ) -> _identity.Identity | None:
        """The OS identity of the owner's task (``_sandbox.Sandbox.identity``; None: the
        master's own)."""
        return self.sandbox.identity(conn, owner_id, workspace_id)

    def private_net(
        self, allocation_id: str, config: Any, env: dict[str, str]
    ) -> _sandbox.PrivateNet | None:
        """The private network of a process with ``proxy_ports`` (``_sandbox.private_net``);
        its ``DET_MASTER`` becomes the relay's 127.0.0.1 end."""
        net = self.sandbox.private_net(allocation_id, config, self.master_url)
        if net is not None:
            env["DET_MASTER"] = f"http://127.0.0.1:{net.master_port}"
        return net

    def task_identity(self, task: dict[str, Any]) -> _identity.Identity | None:
        """Whom ``task`` runs as (its owner, in its workspace); raises LaunchError when the
        sandbox refuses its owner."""
        with self.store.read() as conn:
            self.check_owner(conn, int(task["owner_id"]))
            workspace = (task.get("data") or {}).get("workspaceId")
            return self.identity_of(conn, int(task["owner_id"]), workspace)

    # ------------------------------------------------------------ non-trial tasks

    def end_stale_tasks(self, keep: Collection[str] = ()) -> None:
        """Tasks a previous master ran are over (but those in ``keep``, adopted): their
        processes are killed, rows ended."""
        with self.store.read() as conn:
            stale = [
                t
                for t in _task_rows.live(conn)
                if t["state"] == "RUNNING" and str(t["id"]) not in keep
            ]
        stale_ids = [str(t["allocation_id"]) for t in stale]
        for pid in _recovery.kill_leftovers(stale_ids, self.store.cluster_id):
            logger.warning("killed task process %d left running by a previous master", pid)
        with self.store.tx() as conn:
            for task in stale:
                _task_rows.terminate(conn, str(task["id"]), "the master restarted")
                _users.revoke_allocation_tokens(conn, str(task["allocation_id"]))

    def launch_task(self, task: dict[str, Any], slots: list[int]) -> bool:
        """Start ``task`` as a process group here; False (the task ended as failed to start)
        if it cannot be."""
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        # Held: the process's first lines come after the "have started" note below.
        sink = LogSink(self.logs, task_id, allocation_id, held=True)
        work_dir = self.work_root / allocation_id
        try:
            identity = self.task_identity(task)
            launch = self.prepare_task(task, work_dir, slots)
            for sockets in _tasks.socket_dirs(launch.ports):
                if identity is not None:  # its service makes the socket there, as them
                    os.chown(sockets, identity.uid, identity.gid)
            wrap = self.sandbox_for(
                task["config"] or {},
                work_dir,
                _envs.task_env_dir(self.env_root, task_id),
                read_only=list(((task.get("data") or {}).get("logdirs") or {}).values()),
                caps=_sandbox.SSHD_CAPS if task["type"] == "SHELL" else (),
                groups=_identity.tty_groups() if task["type"] == "SHELL" else (),
                writable=_tasks.socket_dirs(launch.ports),  # a notebook's or TensorBoard's socket
                identity=identity,
                net=self.private_net(allocation_id, task["config"] or {}, launch.env),
            )
            proc = _launcher.TrialProcess(launch.argv, work_dir, launch.env, sink, wrap)
        except Exception as e:
            sink.release()
            self.task_not_started(task, sink, work_dir, e)
            return False
        with self.store.tx() as conn:
            _task_rows.set_running(conn, task_id, allocation_id, launch.ports)
        run = Run([proc], sink, slots, STOP_GRACE_S, allocation_id=allocation_id)
        self.task_runs[task_id] = run
        sink.master(
            f"Resources for {task['description']} have started "
            f"(slots {slots}, pid {proc.pid}, ports {launch.ports})"
        )
        sink.release()
        return True

    def prepare_task(
        self, task: dict[str, Any], work_dir: Path, slots: list[int]
    ) -> _tasks.TaskLaunch:
        """The task's token, environment and work dir, and what it runs (``_tasks.prepare``)."""
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        with self.store.tx() as conn:
            token = _users.issue_token(
                conn, int(task["owner_id"]), kind="user", allocation_id=allocation_id
            )
        environment = _envs.ensure_task(self.env_root, task_id)
        return _tasks.prepare(
            task,
            work_dir,
            environment=environment,
            master_url=self.master_url,
            cluster_id=self.store.cluster_id,
            allocation_id=allocation_id,
            token=token,
            slot_ids=slots,
            gpu=self.gpu,
        )

    def task_not_started(
        self, task: dict[str, Any], sink: LogSink, work_dir: Path, e: Exception
    ) -> None:
        """The task could not be started: say why in its log and end it, leaving nothing."""
        task_id = str(task["id"])
        if not isinstance(e, _launcher.LaunchError):
            logger.exception("launching task %s failed", task_id)
        sink.master(f"crashed: {_launcher.describe(e)}")
        self.logs.flush()
        shutil.rmtree(work_dir, ignore_errors=True)
        _envs.remove_task(self.env_root, task_id)
        with self.store.tx() as conn:
            _task_rows.terminate(conn, task_id, f"failed to start: {_launcher.describe(e)}")
            _users.revoke_allocation_tokens(conn, _task_rows.allocation_of(task))

    def _reap_tasks(self) -> None:
        for task_id, run in list(self.task_runs.items()):
            code = run.exit_code()
            if code is None:
                continue
            del self.task_runs[task_id]
            run.finish()
            if not run.killed:
                run.sink.master(resources_stopped_line(code))
            status = "killed" if run.killed else f"exited with code {code}"
            self._task_ended(task_id, run, status)

    def _task_ended(self, task_id: str, run: Run, status: str) -> None:
        self.free.extend(s for s in run.slots if s not in self.free)
        # The last line goes out before the task is seen to end (a reader of its log then
        # has it all).
        with self.store.read() as conn:
            row = _task_rows.get(conn, task_id)
        pausing = row is not None and (row["data"] or {}).get("pause_requested")
        run.sink.master(f"task {task_id} {'paused' if pausing else status}")
        self.logs.flush()
        with self.store.tx() as conn:
            _task_rows.end_run(conn, task_id, status)  # PAUSED when a pause stopped it
            _users.revoke_allocation_tokens(conn, run.allocation_id)
        for proc in run.procs:
            shutil.rmtree(proc.work_dir, ignore_errors=True)
        for sockets in _tasks.socket_dirs(row["ports"] if row is not None else None):
            shutil.rmtree(sockets, ignore_errors=True)
        self.sandbox.drop_services(run.allocation_id)
        _envs.remove_task(self.env_root, task_id)

    def _tasks_on_disabled(self) -> set[str]:
        """The running tasks on a slot or agent disabled without draining (killed, as 0.37
        kills the containers there)."""
        agents, _ = self.toggles()
        _, doomed_slots = self.slot_blocks()
        doomed_agents = {a for a, t in agents.items() if not t.enabled and not t.draining}
        return {
            task_id
            for task_id, run in self.task_runs.items()
            if doomed_slots.intersection(run.slots) or run.agent in doomed_agents
        }

    def _enforce_tasks(self) -> None:
        """Kill the tasks whose kill (or pause) was asked for, and those whose row ended while
        they were being started (a kill of a QUEUED task ends it at once): SIGTERM, then SIGKILL
        after a grace."""
        with self.store.read() as conn:
            live = {str(t["id"]): t for t in _task_rows.live(conn)}
        doomed = {task_id for task_id, t in live.items() if t["kill_requested"]}
        doomed |= {task_id for task_id in self.task_runs if task_id not in live}
        disabled = self._tasks_on_disabled() - doomed if self.task_runs else set()
        now = time.monotonic()
        for task_id in (doomed | disabled) & set(self.task_runs):
            run = self.task_runs[task_id]
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
