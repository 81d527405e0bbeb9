"""The local backend: runs as process groups on this machine (``_manager`` has the loop).

Slots are the GPUs (one ``CUDA_VISIBLE_DEVICES`` set per run) unless CPU slots are asked for
or there is no GPU. A trial's run takes its slots from one agent when one has enough, else
from whole free agents, one container (process group) per agent.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
from typing import Any

from determined.master.experiment import Experiments
from determined.master.resources import (
    _envs,
    _identity,
    _launcher,
    _queue,
    _recovery,
    _sandbox,
    _tasks,
)
from determined.master.resources._backend import Run
from determined.master.resources._log_capture import LogSink
from determined.master.resources._manager import Manager
from determined.master.store import Store, TrialRow, _experiments, _log_policies, _trials
from determined.master.store import _tasks as _task_rows

logger = logging.getLogger("determined.master")


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


def local_slots(manager: Manager, cpu_slots: int | None, slots_per_agent: int | None) -> bool:
    """Give ``manager`` this machine's slots, split into agents of ``slots_per_agent``; returns
    whether they are GPUs."""
    gpus = [] if cpu_slots is not None else detect_gpus()
    manager.slots = gpus or list(range(cpu_slots or os.cpu_count() or 1))
    per_agent = slots_per_agent or len(manager.slots)
    if per_agent < 1:
        raise ValueError(f"slots_per_agent must be at least 1, not {per_agent}")
    slots = manager.slots
    manager.agents = [slots[i : i + per_agent] for i in range(0, len(slots), per_agent)]
    manager.agent_ids = agent_ids(len(manager.agents))
    manager.free = list(slots)
    return bool(gpus)


class LocalBackend:
    """Runs trials and tasks as process groups here (see ``_manager.Backend``)."""

    def __init__(
        self, manager: Manager, cpu_slots: int | None, slots_per_agent: int | None
    ) -> None:
        self._m = manager
        self.gpu = local_slots(manager, cpu_slots, slots_per_agent)
        self._blocked: set[int] = set()  # slots disabled when this tick's scheduling began

    def recover(self) -> None:
        """Kill the runs a previous master left (they exited, killed: no restart counted) and
        its tasks; remove what they left on disk."""
        m = self._m
        with m.store.read() as conn:
            stale = [str(a["id"]) for a in _trials.live_allocations(conn)]
        if stale:
            for pid in _recovery.kill_leftovers(stale, m.store.cluster_id):
                logger.warning("killed process %d left running by a previous master", pid)
        for allocation_id in stale:
            m.exits[allocation_id] = (-1, True)
        m.record_exits()
        m.tasks.end_stale()
        # No run of ours is going: whatever runs left half done is garbage now.
        _recovery.remove_work_dirs(m.work_root)
        _recovery.remove_staging(m.store)
        with m.store.read() as conn:
            known = set(_experiments.list_experiment_ids(conn))
        for exp_id in _envs.remove_all_but(m.env_root, known):
            logger.info("removed the environment of deleted experiment %d", exp_id)

    def poll(self) -> None:
        """A process group's exit code is there to read: nothing to refresh."""

    def knows_pool(self, name: str) -> bool:
        """The local manager has one resource pool, ``default``."""
        return name == "default"

    def task_refusal(self, kind: str) -> str | None:
        """It runs them all, notebooks once JupyterLab is installed."""
        return _tasks.notebook_refusal() if kind == "NOTEBOOK" else None

    def capacity(self) -> int:
        return len(self._m.slots)

    def occupancy(self) -> dict[int, str]:
        m = self._m
        used = {slot: aid for aid, run in list(m.runs.items()) for slot in run.slots}
        for run in list(m.tasks.runs.values()):
            used.update({slot: run.allocation_id for slot in run.slots})
        return used

    def kill(self, allocation_id: str, run: Run) -> None:
        run.signal(signal.SIGKILL)

    def doomed(self) -> set[str]:
        _, doomed = self._m.slot_blocks()
        return {a for a, run in self._m.runs.items() if doomed.intersection(run.slots)}

    # ------------------------------------------------------------------- trials

    def plan(self) -> None:
        self._blocked = self._m.slot_blocks()[0]

    def run_trial(self, trial: TrialRow, need: int) -> None:
        m = self._m
        containers = self._place(need, self._blocked)
        if containers is None or self._excluded(trial):
            return
        taken = {s for c in containers for s in c}
        m.free = [s for s in m.free if s not in taken]
        if not self._launch(int(trial["id"]), containers):
            m.free.extend(sorted(taken))

    def _excluded(self, trial: TrialRow) -> bool:
        """Whether ``exclude_node`` log policies keep the trial off this machine (its runs'
        lines name the node ``local``): it waits QUEUED, as on 0.37's agents, until killed."""
        with self._m.store.read() as conn:
            nodes = set(_log_policies.blocked_nodes(conn, str(trial["task_id"])))
        return bool(nodes & {"local", *self._m.agent_ids})

    def _place(self, need: int, blocked: set[int] | None = None) -> list[list[int]] | None:
        """Free slots for a run: from one agent when one has enough, else whole free agents
        (a multi-container run); None when it must wait. ``blocked`` slots are never free."""
        m = self._m
        usable = [s for s in m.free if s not in (blocked or set())]
        free_by_agent = [[s for s in agent if s in usable] for agent in m.agents]
        for free in free_by_agent:
            if len(free) >= need:
                return [sorted(free)[:need]]
        whole = [free for free, agent in zip(free_by_agent, m.agents, strict=True) if free == agent]
        taken, containers = 0, []
        for agent in whole:
            if taken >= need:
                break
            containers.append(agent[: need - taken])
            taken += len(containers[-1])
        return containers if taken == need else None

    def _launch(self, trial_id: int, containers: list[list[int]]) -> bool:
        m = self._m
        resources = [
            {"resourcesId": str(i), "address": "127.0.0.1", "slots": len(slots)}
            for i, slots in enumerate(containers)
        ]
        allocated = m.allocate(trial_id, resources)
        if allocated is None:
            return False
        alloc, token = allocated
        allocation_id = str(alloc["id"])
        sink = LogSink(m.logs, str(alloc["task_id"]), allocation_id)
        procs: list[_launcher.TrialProcess] = []
        try:
            spec, identity = m.launch_spec(alloc, token, containers)
            for i in range(len(containers)):
                procs.append(self._start_container(spec, i, identity))
        except Exception as e:  # any error: the trial fails with it, the slots come back
            for proc in procs:
                proc.signal_group(signal.SIGKILL)
                proc.finish()
            shutil.rmtree(m.work_root / allocation_id, ignore_errors=True)
            m.launch_failed(allocation_id, sink, e)
            return False
        timeout = float(spec.config.preemption_timeout or 3600)  # 0: the default, as before
        m.runs[spec.allocation_id] = Run(
            list(procs), sink, spec.slot_ids, timeout, port_offset=spec.port_offset
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
        m = self._m
        work_dir = m.work_root / spec.allocation_id
        if len(spec.containers) > 1:
            work_dir = work_dir / str(i)  # like separate machines: no shared work dir
        _launcher.prepare_work_dir(work_dir, spec, m.sandbox.active)
        env = _launcher.trial_env(spec, m.master_url, m.store.cluster_id, work_dir, i)
        environment = _envs.ensure(m.env_root, spec.experiment_id)
        _envs.activate(env, environment)
        cid = _launcher.container_id(spec.allocation_id, i)
        sink = LogSink(m.logs, spec.task_id, spec.allocation_id, cid)
        argv = _launcher.command(str(_envs.python_of(environment)))
        net = None
        if len(spec.containers) == 1:  # containers of one trial talk over 127.0.0.1
            net = m.private_net(spec.allocation_id, spec.config, env)
        elif i == 0 and _sandbox.proxy_ports(spec.config) and m.sandbox.active:
            sink.master(
                "warning: the proxy_ports of a trial in several containers listen on the "
                "host's 127.0.0.1, where any local user reaches them (docs/security.md)"
            )
        wrap = m.sandbox_for(spec.config, work_dir, environment, identity=identity, net=net)
        hook = m.startup_hook_of(spec.config)
        return _launcher.TrialProcess(argv, work_dir, env, sink, wrap, hook)

    # ------------------------------------------------------------ non-trial tasks

    def schedule_tasks(self) -> None:
        """Start queued tasks, by priority (``det cmd set priority``) then oldest first, while
        their slots are free (0 slots: always)."""
        m = self._m
        with m.store.read() as conn:
            queued = _task_rows.queued(conn)
        queued.sort(key=lambda t: _queue.priority_of(t["config"] or {}))  # stable: keeps age
        blocked, _ = m.slot_blocks() if queued else (set(), set())
        for task in queued:
            if m.stopping.is_set():
                return
            need = int(task["slots"])
            slots: list[int] = []
            if need > len(m.slots):
                continue  # refused at creation; a smaller master since: it waits
            agent: str | None = ""
            if need:
                containers = self._place(need, blocked)
                if containers is None or len(containers) != 1:
                    continue
                slots = containers[0]
                m.free = [s for s in m.free if s not in slots]
            else:
                agent = self._zero_slot_agent()
                if agent is None:
                    continue  # every agent is disabled: it waits, as in 0.37
            if not m.tasks.launch(task, slots):
                m.free.extend(slots)
            elif agent:
                m.tasks.runs[str(task["id"])].agent = agent

    def _zero_slot_agent(self) -> str | None:
        """The agent a task without slots runs on (0.37 places those on an agent too): the
        first enabled one; None while every agent is disabled."""
        agents, _ = self._m.toggles()
        return next((a for a in self._m.agent_ids if agents[a].enabled), None)


class LocalResourceManager(Manager):
    """A :class:`~_manager.Manager` over a :class:`LocalBackend`.

    Args:
        cpu_slots: use this many CPU slots; None: the GPUs, or ``os.cpu_count()`` without any.
        slots_per_agent: split the slots into simulated agents of this many; a trial needing
            more than one agent's slots runs one container (process group) per agent, which
            find each other through the rendezvous endpoint, as on a multi-node cluster.
        common: ``Manager``'s (``master_url``, ``work_root``, ``log_hook``, ``sandbox``).
    """

    def __init__(
        self,
        store: Store,
        experiments: Experiments,
        *,
        cpu_slots: int | None = None,
        slots_per_agent: int | None = None,
        **common: Any,
    ) -> None:
        super().__init__(store, experiments, **common)
        self.backend = LocalBackend(self, cpu_slots, slots_per_agent)
