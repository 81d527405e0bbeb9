"""The local resource manager: runs trials as process groups on this machine.

Slots are the GPUs (one ``CUDA_VISIBLE_DEVICES`` set per run) unless CPU slots are asked for
or there is no GPU. One thread does everything, on a short tick or when an experiment event
wakes it: reap exited runs (-> :meth:`Experiments.allocation_exited`), enforce kills and the
preemption timeout, then start the runnable trials (in the job queue's order, ``_queue``)
while slots are free.

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
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

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
    Store,
    TrialRow,
    _agent_states,
    _experiments,
    _log_policies,
    _trials,
    _users,
)
from determined.master.store import _tasks as _task_rows

logger = logging.getLogger("determined.master")
TICK_S = 0.5
# Why a run is asked to stop, by its trial's state (else a pause or a searcher's stop).
_STOP_REASONS = {
    State.STOPPING_COMPLETED.value: "the trial's work is done",
    State.STOPPING_CANCELED.value: "canceled",
}
STOP_GRACE_S = 3.0


def detect_gpus() -> list[int]:
    """GPU indices from ``nvidia-smi``, else from torch when it is importable; [] if none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if out.returncode == 0:
            return [int(x) for x in out.stdout.split() if x.strip().isdigit()]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch

        return list(range(torch.cuda.device_count()))
    except Exception:  # no torch, or a torch without CUDA
        return []


def agent_ids(count: int) -> list[str]:
    """The hostname for a single agent, ``<hostname>-<i>`` for simulated ones."""
    host = socket.gethostname() or "localhost"
    return [host] if count == 1 else [f"{host}-{i}" for i in range(count)]


def kill_leftovers(allocation_ids: list[str], cluster_id: str) -> list[int]:
    """SIGKILL the processes a previous master (killed with -9) left running for these
    allocations, found by the ``DET_ALLOCATION_ID`` and ``DET_CLUSTER_ID`` in their
    environment; returns their pids. Only this user's processes are readable, which is all a
    master can have started.

    The cluster id matters: allocation ids repeat across masters (the request id in them is
    drawn from ``experiment_seed``, which defaults to the current second), and another master
    on this machine may run an allocation of the same id right now."""
    wanted = {f"DET_ALLOCATION_ID={a}".encode() for a in allocation_ids}
    ours = f"DET_CLUSTER_ID={cluster_id}".encode()
    killed = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = set((proc / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if ours in env and env & wanted:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
            except OSError:
                pass
    return killed


def resources_stopped_line(code: int) -> str:
    """0.37's last log line of an allocation that ended by itself (its e2e tests and users grep
    for these words)."""
    if code == 0:
        return "resources exited successfully with a zero exit code"
    return (
        "crashed: resources failed with non-zero exit code: container failed "
        f"with non-zero exit code: {code} (exit code {code})"
    )


@dataclasses.dataclass
class _Run:
    """One allocation: a process group per container (one, unless it spans agents)."""

    procs: list[_launcher.TrialProcess]
    sink: LogSink
    slots: list[int]
    timeout_s: float
    port_offset: int = 0
    preempted_at: float | None = None
    killed: bool = False
    allocation_id: str = ""  # a task's (trials' runs are keyed by theirs)
    agent: str = ""  # the agent a task without slots was placed on

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


class LocalResourceManager:
    """Runs the trials of ``experiments`` (call :meth:`start` once the app serves), and the
    non-trial tasks of ``store._tasks`` (commands, notebooks, ...: docs/tasks.md).

    Args:
        master_url: what trials use as ``DET_MASTER``.
        work_root: runs get ``<work_root>/<allocation id>`` as their work dir (removed after).
        cpu_slots: use this many CPU slots; None: the GPUs, or ``os.cpu_count()`` without any.
        slots_per_agent: split the slots into simulated agents of this many; a trial needing
            more than one agent's slots runs one container (process group) per agent, which
            find each other through the rendezvous endpoint, as on a multi-node cluster.
        log_hook: called with each batch of the runs' log lines, inside the transaction that
            stores them (webhooks match task-log patterns there).
    """

    def __init__(
        self,
        store: Store,
        experiments: Experiments,
        *,
        master_url: str,
        work_root: Path,
        cpu_slots: int | None = None,
        slots_per_agent: int | None = None,
        log_hook: LogHook | None = None,
        sandbox: _sandbox.Sandbox | None = None,
    ) -> None:
        self._store = store
        # Every trial and task process starts inside it (``_sandbox``); None: no sandbox.
        self.sandbox = sandbox or _sandbox.Sandbox("none", None, "task_isolation: none")
        self._exps = experiments
        self._master_url = master_url
        self._work_root = work_root
        # The experiments' Python environments (``_envs``), beside the work dirs.
        self._env_root = work_root.parent / "envs"
        gpus = [] if cpu_slots is not None else detect_gpus()
        self.gpu = bool(gpus)
        self.slots = gpus or list(range(cpu_slots or os.cpu_count() or 1))
        per_agent = slots_per_agent or len(self.slots)
        if per_agent < 1:
            raise ValueError(f"slots_per_agent must be at least 1, not {per_agent}")
        self.agents = [self.slots[i : i + per_agent] for i in range(0, len(self.slots), per_agent)]
        self.agent_ids = agent_ids(len(self.agents))
        self._free = list(self.slots)
        self.started_at = time.time()
        self._runs: dict[str, _Run] = {}
        # Non-trial tasks (commands, notebooks, ...): task id -> its run.
        self._task_runs: dict[str, _Run] = {}
        # Exits not yet recorded (the store failed, e.g. a full disk): ``allocation id ->
        # (exit code, killed)``, retried every tick until written.
        self._exits: dict[str, tuple[int, bool]] = {}
        self._warned: set[int] = set()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._logs = LogWriter(store, log_hook)
        self._thread = threading.Thread(target=self._loop, name="resource-manager", daemon=True)
        experiments.subscribe(on_change=self._wake.set)

    def start(self) -> None:
        """Close runs a previous master left behind (no restart counted), then schedule."""
        with self._store.read() as conn:
            stale = [str(a["id"]) for a in _trials.live_allocations(conn)]
        if stale:
            for pid in kill_leftovers(stale, self._store.cluster_id):
                logger.warning("killed process %d left running by a previous master", pid)
        for allocation_id in stale:
            self._exits[allocation_id] = (-1, True)
        self._record_exits()
        self._end_stale_tasks()
        # No run of ours is going: whatever runs left half done is garbage now.
        _recovery.remove_work_dirs(self._work_root)
        _recovery.remove_staging(self._store)
        with self._store.read() as conn:
            known = set(_experiments.list_experiment_ids(conn))
        for exp_id in _envs.remove_all_but(self._env_root, known):
            logger.info("removed the environment of deleted experiment %d", exp_id)
        self._thread.start()

    def knows_pool(self, name: str) -> bool:
        """Whether ``name`` is one of its resource pools: the local manager has one,
        ``default``."""
        return name == "default"

    def task_refusal(self, kind: str) -> str | None:
        """Why it cannot run a task of ``kind`` (the API refuses to queue one), or None: it
        runs them all, notebooks once JupyterLab is installed."""
        return _tasks.notebook_refusal() if kind == "NOTEBOOK" else None

    def terminate_all(self) -> None:
        """SIGTERM every run's process group (the master is stopping); :meth:`stop` follows."""
        self._stopping.set()
        for run in [*self._runs.values(), *self._task_runs.values()]:
            run.signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop scheduling and make sure no trial process outlives the master."""
        self._halt()
        self._wind_down([*self._runs.values(), *self._task_runs.values()], list(self._task_runs))
        self._logs.close()

    def _halt(self) -> None:
        """SIGTERM what must not outlive the master (:meth:`terminate_all`) and end the loop."""
        self.terminate_all()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _wind_down(self, runs: list[_Run], task_ids: list[str]) -> None:
        """After :meth:`terminate_all`: give ``runs`` up to :data:`STOP_GRACE_S` to exit, reap
        them, and record the end of the tasks ``task_ids`` (of ``_task_runs``). Both resource
        managers stop this way (Slurm's jobs themselves keep running)."""
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(r.exit_code() is None for r in runs):
            time.sleep(0.05)
        for run in runs:
            run.finish(timeout=1.0)
        for task_id in task_ids:
            try:
                self._task_ended(task_id, self._task_runs.pop(task_id), "the master stopped")
            except Exception:  # the store is going too: the next master ends it
                logger.exception("cannot record the end of task %s", task_id)

    # ------------------------------------------------------------------- the loop

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            if self._stopping.is_set():
                return
            # Each step guards its own items too: one bad trial never stalls the others.
            steps = (
                self._reap,
                self._record_exits,
                self._enforce,
                self._reap_tasks,
                self._enforce_tasks,
                self._schedule_tasks,
                self._schedule,
            )
            for step in steps:
                try:
                    step()
                except Exception:  # keep scheduling whatever one event did
                    logger.exception("resource manager tick failed in %s", step.__name__)

    def _reap(self) -> None:
        for allocation_id, run in list(self._runs.items()):
            code = run.exit_code()
            if code is None:
                if run.failed_container() and not run.killed:
                    # One container of a multi-container run failed: the rest cannot finish.
                    self._kill(run, "another container of the trial failed")
                continue
            del self._runs[allocation_id]
            self._free.extend(run.slots)
            self._exits[allocation_id] = (code, run.killed)
            run.finish()
            if not run.killed:
                run.sink.master(resources_stopped_line(code))
            run.sink.master(f"allocation {allocation_id} exited with code {code}")
            self._logs.flush()
            for proc in run.procs:
                shutil.rmtree(proc.work_dir, ignore_errors=True)
            self.sandbox.drop_services(allocation_id)

    def _record_exits(self) -> None:
        """Tell the experiment domain about every exit not recorded yet; one that cannot be
        written now (a full disk) stays pending for the next tick, so a trial never waits in
        a STOPPING state for an exit the master saw but lost."""
        for allocation_id, (code, killed) in list(self._exits.items()):
            try:
                self._exps.allocation_exited(
                    allocation_id, code, killed=killed, excluded_waits=True
                )
            except Exception as e:  # the store, most likely: retried on the next tick
                logger.warning("cannot record the exit of %s yet (%r); retrying", allocation_id, e)
                continue
            del self._exits[allocation_id]

    def _enforce(self) -> None:
        """Kill runs of killed trials at once and preempted ones after their timeout."""
        with self._store.read() as conn:
            rows = {str(a["id"]): a for a in _trials.live_allocations(conn)}
        now = time.monotonic()
        _, doomed = self.slot_blocks() if self._runs else (set(), set())
        for allocation_id, run in self._runs.items():
            row = rows.get(allocation_id)
            if row is None or run.killed:
                continue
            if row["trial_state"] == State.STOPPING_KILLED.value:
                self._kill(run, "killed")
            elif doomed.intersection(run.slots):
                self._kill(run, "its agent or slot was disabled")
            elif row["preempted"] and run.preempted_at is None:
                run.preempted_at = now
                reason = _STOP_REASONS.get(str(row["trial_state"]), "preempted")
                run.sink.master(
                    f"gracefully terminating allocation's remaining resources (reason: {reason})"
                )
            elif run.preempted_at is not None and now - run.preempted_at > run.timeout_s:
                self._kill(run, "preemption timeout")

    def _kill(self, run: _Run, reason: str) -> None:
        run.sink.master(f"forcibly killing allocation's remaining resources (reason: {reason})")
        run.killed = True
        run.signal(signal.SIGKILL)
        self._wake.set()

    def toggles(self) -> tuple[dict[str, _agent_states.Toggle], dict[int, _agent_states.Toggle]]:
        """``(agents, slots)``: each agent's and each slot's own state as an admin set it
        (enabled unless disabled)."""
        with self._store.read() as conn:
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

    def _schedule(self) -> None:
        with self._store.read() as conn:
            runnable = _queue.runnable_in_order(conn)
        blocked, _ = self.slot_blocks() if runnable else (set(), set())
        for trial in runnable:
            if self._stopping.is_set():
                return
            try:
                need = self._slots_needed(trial)
            except Exception:  # its experiment's row, say: the other trials still start
                logger.exception("cannot schedule trial %s", trial["id"])
                continue
            containers = None if need is None else self._place(need, blocked)
            if containers is None or self._excluded(trial):
                continue
            taken = {s for c in containers for s in c}
            self._free = [s for s in self._free if s not in taken]
            if not self._launch(int(trial["id"]), containers):
                self._free.extend(sorted(taken))

    def _excluded(self, trial: TrialRow) -> bool:
        """Whether ``exclude_node`` log policies keep the trial off this machine (its runs'
        lines name the node ``local``): it waits QUEUED, as on 0.37's agents, until killed."""
        with self._store.read() as conn:
            nodes = set(_log_policies.blocked_nodes(conn, str(trial["task_id"])))
        return bool(nodes & {"local", *self.agent_ids})

    def _place(self, need: int, blocked: set[int] | None = None) -> list[list[int]] | None:
        """Free slots for a run: from one agent when one has enough, else whole free agents
        (a multi-container run); None when it must wait. ``blocked`` slots are never free."""
        usable = [s for s in self._free if s not in (blocked or set())]
        free_by_agent = [[s for s in agent if s in usable] for agent in self.agents]
        for free in free_by_agent:
            if len(free) >= need:
                return [sorted(free)[:need]]
        whole = [
            free for free, agent in zip(free_by_agent, self.agents, strict=True) if free == agent
        ]
        taken, containers = 0, []
        for agent in whole:
            if taken >= need:
                break
            containers.append(agent[: need - taken])
            taken += len(containers[-1])
        return containers if taken == need else None

    def capacity(self) -> int:
        return len(self.slots)

    def wake(self) -> None:
        """Run a scheduling tick now, not on the next one (a task was created or asked to stop,
        an agent or slot changed state, the queue was reordered)."""
        self._wake.set()

    def occupancy(self) -> dict[int, str]:
        """Slot -> the id of the allocation running on it, for the slots in use now."""
        used = {slot: aid for aid, run in list(self._runs.items()) for slot in run.slots}
        for run in list(self._task_runs.values()):
            used.update({slot: run.allocation_id for slot in run.slots})
        return used

    def _slots_needed(self, trial: TrialRow) -> int | None:
        with self._store.read() as conn:
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

    def _launch(self, trial_id: int, containers: list[list[int]]) -> bool:
        resources = [
            {"resourcesId": str(i), "address": "127.0.0.1", "slots": len(slots)}
            for i, slots in enumerate(containers)
        ]
        try:
            alloc, token = self._exps.allocate(trial_id, resources)
        except ApiError:
            return False  # it changed since the read (paused, killed): not runnable now
        except Exception:  # the store failed (a full disk): try again on a later tick
            logger.exception("cannot allocate trial %s", trial_id)
            return False
        allocation_id = str(alloc["id"])
        sink = LogSink(self._logs, str(alloc["task_id"]), allocation_id)
        procs: list[_launcher.TrialProcess] = []
        try:
            with self._store.read() as conn:
                spec = _launcher.launch_spec(conn, alloc, token, containers, self.gpu)
                owner = _experiments.owner_of(conn, spec.experiment_id)
                self.check_owner(conn, owner)
                workspace = _identity.experiment_workspace(conn, spec.experiment_id)
                identity = self.identity_of(conn, owner, workspace)
            spec.port_offset = _launcher.pick_port_offset(
                {r.port_offset for r in self._runs.values()}
            )
            for i in range(len(containers)):
                procs.append(self._start_container(spec, i, identity))
        except Exception as e:  # any error: the trial fails with it, the slots come back
            if not isinstance(e, _launcher.LaunchError):
                logger.exception("launching allocation %s failed", allocation_id)
            sink.master(f"crashed: {_launcher.describe(e)}")
            self._logs.flush()
            for proc in procs:
                proc.signal_group(signal.SIGKILL)
                proc.finish()
            shutil.rmtree(self._work_root / allocation_id, ignore_errors=True)
            self._exits[allocation_id] = (1, False)
            self._record_exits()
            return False
        timeout = float(spec.config.preemption_timeout or 3600)  # 0: the default, as before
        self._runs[spec.allocation_id] = _Run(
            procs, sink, spec.slot_ids, timeout, port_offset=spec.port_offset
        )
        sink.master(
            f"Resources for Trial {spec.trial_id} (Experiment {spec.experiment_id}) have "
            f"started (slots {spec.slot_ids}, pids {[p.pid for p in procs]})"
        )
        return True

    def _start_container(
        self, spec: _launcher.LaunchSpec, i: int, identity: _identity.Identity | None = None
    ) -> _launcher.TrialProcess:
        """Unpack the model definition for container ``i`` and start its process group."""
        work_dir = self._work_root / spec.allocation_id
        if len(spec.containers) > 1:
            work_dir = work_dir / str(i)  # like separate machines: no shared work dir
        _launcher.prepare_work_dir(work_dir, spec)
        env = _launcher.trial_env(spec, self._master_url, self._store.cluster_id, work_dir, i)
        environment = _envs.ensure(self._env_root, spec.experiment_id)
        _envs.activate(env, environment)
        cid = _launcher.container_id(spec.allocation_id, i)
        sink = LogSink(self._logs, spec.task_id, spec.allocation_id, cid)
        argv = _launcher.command(str(_envs.python_of(environment)))
        net = None
        if len(spec.containers) == 1:  # containers of one trial talk over 127.0.0.1
            net = self.private_net(spec.allocation_id, spec.config, env)
        elif i == 0 and _sandbox.proxy_ports(spec.config) and self.sandbox.active:
            sink.master(
                "warning: the proxy_ports of a trial in several containers listen on the "
                "host's 127.0.0.1, where any local user reaches them (docs/security.md)"
            )
        wrap = self.sandbox_for(spec.config, work_dir, environment, identity=identity, net=net)
        return _launcher.TrialProcess(argv, work_dir, env, sink, wrap)

    def private_net(
        self, allocation_id: str, config: Any, env: dict[str, str]
    ) -> _sandbox.PrivateNet | None:
        """The private network of a process with ``proxy_ports`` (``_sandbox.private_net``);
        its ``DET_MASTER`` becomes the relay's 127.0.0.1 end."""
        net = self.sandbox.private_net(allocation_id, config, self._master_url)
        if net is not None:
            env["DET_MASTER"] = f"http://127.0.0.1:{net.master_port}"
        return net

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

    def drop_environment(self, experiment_id: int) -> None:
        """Delete an experiment's environment (the experiment is deleted)."""
        _envs.remove(self._env_root, experiment_id)

    # ------------------------------------------------------------ non-trial tasks

    def _end_stale_tasks(self, keep: Collection[str] = ()) -> None:
        """Tasks a previous master ran are over (but those in ``keep``, adopted): their
        processes are killed, rows ended."""
        with self._store.read() as conn:
            stale = [
                t
                for t in _task_rows.live(conn)
                if t["state"] == "RUNNING" and str(t["id"]) not in keep
            ]
        stale_ids = [str(t["allocation_id"]) for t in stale]
        for pid in kill_leftovers(stale_ids, self._store.cluster_id):
            logger.warning("killed task process %d left running by a previous master", pid)
        with self._store.tx() as conn:
            for task in stale:
                _task_rows.terminate(conn, str(task["id"]), "the master restarted")
                _users.revoke_allocation_tokens(conn, str(task["allocation_id"]))

    def _schedule_tasks(self) -> None:
        """Start queued tasks, by priority (``det cmd set priority``) then oldest first, while
        their slots are free (0 slots: always)."""
        with self._store.read() as conn:
            queued = _task_rows.queued(conn)
        queued.sort(key=lambda t: _queue.priority_of(t["config"] or {}))  # stable: keeps age
        blocked, _ = self.slot_blocks() if queued else (set(), set())
        for task in queued:
            if self._stopping.is_set():
                return
            need = int(task["slots"])
            slots: list[int] = []
            if need > len(self.slots):
                continue  # refused at creation; a smaller master since: it waits
            agent: str | None = ""
            if need:
                containers = self._place(need, blocked)
                if containers is None or len(containers) != 1:
                    continue
                slots = containers[0]
                self._free = [s for s in self._free if s not in slots]
            else:
                agent = self._zero_slot_agent()
                if agent is None:
                    continue  # every agent is disabled: it waits, as in 0.37
            if not self._launch_task(task, slots):
                self._free.extend(slots)
            elif agent:
                self._task_runs[str(task["id"])].agent = agent

    def _zero_slot_agent(self) -> str | None:
        """The agent a task without slots runs on (0.37 places those on an agent too): the
        first enabled one; None while every agent is disabled."""
        agents, _ = self.toggles()
        return next((a for a in self.agent_ids if agents[a].enabled), None)

    def _tasks_on_disabled(self) -> set[str]:
        """The running tasks on a slot or agent disabled without draining (killed, as 0.37
        kills the containers there)."""
        agents, _ = self.toggles()
        _, doomed_slots = self.slot_blocks()
        doomed_agents = {a for a, t in agents.items() if not t.enabled and not t.draining}
        return {
            task_id
            for task_id, run in self._task_runs.items()
            if doomed_slots.intersection(run.slots) or run.agent in doomed_agents
        }

    def _launch_task(self, task: dict[str, Any], slots: list[int]) -> bool:
        """Start ``task`` as a process group here; False (the task ended as failed to start)
        if it cannot be."""
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        # Held: the process's first lines come after the "have started" note below.
        sink = LogSink(self._logs, task_id, allocation_id, held=True)
        work_dir = self._work_root / allocation_id
        try:
            with self._store.read() as conn:
                self.check_owner(conn, int(task["owner_id"]))
                workspace = (task.get("data") or {}).get("workspaceId")
                identity = self.identity_of(conn, int(task["owner_id"]), workspace)
            launch = self._prepare_task(task, work_dir, slots)
            for sockets in _tasks.socket_dirs(launch.ports):
                if identity is not None:  # its service makes the socket there, as them
                    os.chown(sockets, identity.uid, identity.gid)
            wrap = self.sandbox_for(
                task["config"] or {},
                work_dir,
                _envs.task_env_dir(self._env_root, task_id),
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
            self._task_not_started(task, sink, work_dir, e)
            return False
        with self._store.tx() as conn:
            _task_rows.set_running(conn, task_id, allocation_id, launch.ports)
        run = _Run([proc], sink, slots, STOP_GRACE_S, allocation_id=allocation_id)
        self._task_runs[task_id] = run
        sink.master(
            f"Resources for {task['description']} have started "
            f"(slots {slots}, pid {proc.pid}, ports {launch.ports})"
        )
        sink.release()
        return True

    def _prepare_task(
        self, task: dict[str, Any], work_dir: Path, slots: list[int]
    ) -> _tasks.TaskLaunch:
        """The task's token, environment and work dir, and what it runs (``_tasks.prepare``)."""
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        with self._store.tx() as conn:
            token = _users.issue_token(
                conn, int(task["owner_id"]), kind="user", allocation_id=allocation_id
            )
        environment = _envs.ensure_task(self._env_root, task_id)
        return _tasks.prepare(
            task,
            work_dir,
            environment=environment,
            master_url=self._master_url,
            cluster_id=self._store.cluster_id,
            allocation_id=allocation_id,
            token=token,
            slot_ids=slots,
            gpu=self.gpu,
        )

    def _task_not_started(
        self, task: dict[str, Any], sink: LogSink, work_dir: Path, e: Exception
    ) -> None:
        """The task could not be started: say why in its log and end it, leaving nothing."""
        task_id = str(task["id"])
        if not isinstance(e, _launcher.LaunchError):
            logger.exception("launching task %s failed", task_id)
        sink.master(f"crashed: {_launcher.describe(e)}")
        self._logs.flush()
        shutil.rmtree(work_dir, ignore_errors=True)
        _envs.remove_task(self._env_root, task_id)
        with self._store.tx() as conn:
            _task_rows.terminate(conn, task_id, f"failed to start: {_launcher.describe(e)}")
            _users.revoke_allocation_tokens(conn, _task_rows.allocation_of(task))

    def _reap_tasks(self) -> None:
        for task_id, run in list(self._task_runs.items()):
            code = run.exit_code()
            if code is None:
                continue
            del self._task_runs[task_id]
            run.finish()
            if not run.killed:
                run.sink.master(resources_stopped_line(code))
            status = "killed" if run.killed else f"exited with code {code}"
            self._task_ended(task_id, run, status)

    def _task_ended(self, task_id: str, run: _Run, status: str) -> None:
        self._free.extend(s for s in run.slots if s not in self._free)
        # The last line goes out before the task is seen to end (a reader of its log then
        # has it all).
        with self._store.read() as conn:
            row = _task_rows.get(conn, task_id)
        pausing = row is not None and (row["data"] or {}).get("pause_requested")
        run.sink.master(f"task {task_id} {'paused' if pausing else status}")
        self._logs.flush()
        with self._store.tx() as conn:
            _task_rows.end_run(conn, task_id, status)  # PAUSED when a pause stopped it
            _users.revoke_allocation_tokens(conn, run.allocation_id)
        for proc in run.procs:
            shutil.rmtree(proc.work_dir, ignore_errors=True)
        for sockets in _tasks.socket_dirs(row["ports"] if row is not None else None):
            shutil.rmtree(sockets, ignore_errors=True)
        self.sandbox.drop_services(run.allocation_id)
        _envs.remove_task(self._env_root, task_id)

    def _enforce_tasks(self) -> None:
        """Kill the tasks whose kill (or pause) was asked for, and those whose row ended while
        they were being started (a kill of a QUEUED task ends it at once): SIGTERM, then SIGKILL
        after a grace."""
        with self._store.read() as conn:
            live = {str(t["id"]): t for t in _task_rows.live(conn)}
        doomed = {task_id for task_id, t in live.items() if t["kill_requested"]}
        doomed |= {task_id for task_id in self._task_runs if task_id not in live}
        disabled = self._tasks_on_disabled() - doomed if self._task_runs else set()
        now = time.monotonic()
        for task_id in (doomed | disabled) & set(self._task_runs):
            run = self._task_runs[task_id]
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
