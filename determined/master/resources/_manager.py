"""The resource manager: one loop over the runs of trials and tasks, whatever runs them.

:class:`Manager` holds what every cluster shares: the runs, the exits not yet recorded, the
agents and slots the API shows (and an admin disables), the tasks (``_task_runs``) and the
stop. Its :class:`~_backend.Backend` decides the rest: where a run goes and how it starts, is
killed and is found again after a restart: local process groups (``_local.LocalBackend``) or
Slurm jobs (``_slurm.SlurmBackend``).

One thread does everything, on a short tick or when an experiment event wakes it: reap exited
runs (-> :meth:`Experiments.allocation_exited`), enforce kills and the preemption timeout, then
start the runnable trials (in the job queue's order, ``_queue``) and the queued tasks.

Agents and slots an admin disabled (``store._agent_states``, read each tick) take no new work;
work running on one disabled without draining is killed (the trial runs again elsewhere, no
restart counted), as 0.37 kills the containers of an agent disabled without ``--drain``.
"""

from __future__ import annotations

import functools
import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from determined.master._errors import ApiError
from determined.master.experiment import ContainerDefaults, Experiments, State
from determined.master.resources import (
    _envs,
    _identity,
    _launcher,
    _queue,
    _sandbox,
)
from determined.master.resources._backend import (
    STOP_GRACE_S,
    Backend,
    Run,
    resources_stopped_line,
)
from determined.master.resources._log_capture import LogHook, LogSink, LogWriter
from determined.master.resources._task_runs import TaskRuns
from determined.master.store import (
    AllocationRow,
    Store,
    TrialRow,
    _agent_states,
    _experiments,
    _trials,
    _users,
)

logger = logging.getLogger("determined.master")
TICK_S = 0.5
# Why a run is asked to stop, by its trial's state (else a pause or a searcher's stop).
_STOP_REASONS = {
    State.STOPPING_COMPLETED.value: "the trial's work is done",
    State.STOPPING_CANCELED.value: "canceled",
}


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
        container_defaults: the master config's ``task_container_defaults`` (their startup
            hook runs before each process).
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
        container_defaults: ContainerDefaults | None = None,
    ) -> None:
        self.store = store
        self.sandbox = sandbox or _sandbox.Sandbox("none", None, "task_isolation: none")
        self.container_defaults = container_defaults or ContainerDefaults()
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
        self.tasks = TaskRuns(self)  # non-trial tasks (commands, notebooks, ...)
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
        for run in [*self.runs.values(), *self.tasks.runs.values()]:
            if not run.detached:
                run.signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop scheduling and make sure no process of a run outlives the master: give them up
        to :data:`STOP_GRACE_S` to exit, reap them, record the end of their tasks."""
        self.terminate_all()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for run in [*self.runs.values(), *self.tasks.runs.values()]:
            if run.detached:
                run.finish()  # the output it wrote so far
        runs = [r for r in [*self.runs.values(), *self.tasks.runs.values()] if not r.detached]
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(r.exit_code() is None for r in runs):
            time.sleep(0.05)
        for run in runs:
            run.finish(timeout=1.0)
        for task_id, run in list(self.tasks.runs.items()):
            if run.detached:
                continue
            try:
                self.tasks.ended(task_id, self.tasks.runs.pop(task_id), "the master stopped")
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
                self.tasks.reap,
                self.tasks.enforce,
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
        with self.store.tx() as conn:
            spec = _launcher.launch_spec(conn, alloc, token, containers, self.gpu)
            owner = _experiments.owner_of(conn, spec.experiment_id)
            self.check_owner(conn, owner)
            # 0.37's DET_USER/DET_USER_TOKEN: `det` in the trial is its owner; the token is
            # the run's, revoked with its allocation token when the run ends.
            spec.user = str(_users.require_user(conn, owner)["username"])
            spec.user_token = _users.issue_token(
                conn, owner, kind="user", allocation_id=spec.allocation_id
            )
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
        submitted: bool = False,
    ) -> Callable[[list[str]], list[str]]:
        """What wraps a process of ``config`` (a task's or an experiment's) in the sandbox:
        its work dir, storage paths and ``writable`` writable, its environment read-only;
        ``chdir``: start in the work dir (else where it was started); ``identity``: the OS
        user it runs as (its work dir becomes theirs, ``_identity``); ``net``: its own
        network namespace (a process with ``proxy_ports``); ``groups``: the identity's
        supplementary groups (a shell's: ``tty``); ``submitted``: the process starts as the
        identity (a Slurm job submitted for it), which gets search permission on the
        directories leading to every path its sandbox binds (``_identity.grant_search``;
        raises OSError where the file system has no ACLs)."""
        storage, mounts = _sandbox.storage_paths(config)
        accounts = None
        per_rank = False
        if identity is not None:
            _identity.hand_over(identity, work_dir, environment)
            self.sandbox.open_storage(storage, identity)
            accounts = _identity.account_files(identity, work_dir / ".det-accounts", work_dir)
            per_rank = not chdir  # a Slurm job's: the identity enters work/<rank> itself
        _sandbox.make_paths(storage)
        moved = _sandbox.moved_mounts(config)
        if identity is not None and submitted:
            bound = [work_dir, environment, *storage, *writable, *mounts, *read_only]
            bound += [m.host_path for m in moved]
            _identity.grant_search([*bound, *_sandbox.python_paths()], identity.uid)
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
            mounts=moved,
            submitted=submitted,
        )

    def startup_hook_of(self, config: Any) -> str:
        """The ``task_container_defaults.startup_hook`` of the pool ``config`` (a task's or an
        experiment's) runs in; "" when none."""
        if not isinstance(config, dict):  # a typed experiment config
            config = config.to_json_dict()
        resources = config.get("resources")
        pool = resources.get("resource_pool") if isinstance(resources, dict) else None
        return self.container_defaults.startup_hook(str(pool) if pool else None)

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
