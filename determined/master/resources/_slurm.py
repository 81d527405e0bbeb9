"""The Slurm backend: each trial allocation is one Slurm batch job (``_manager`` has the loop,
``_slurm_jobs`` Slurm's commands).

Slurm does the placing and queueing: every runnable trial is submitted at once with
``sbatch``; its batch script starts the trial with ``srun`` (one task per node), so that
``scancel --signal`` reaches the trial's processes. A restarted master adopts the jobs still
queued or running (no trial lost or started twice). The work dirs must be on a filesystem
every node sees (here: one host).

Slurm's nodes are the agents (``sinfo``; their CPUs, or GPUs from the gres, are the slots): a
node disabled (or with a disabled slot: Slurm places whole tasks) gets no new job (``sbatch
--exclude``; a job waits while too few nodes are left), and without draining the jobs running
on it are killed (the trial runs again elsewhere).

A root master with a sandbox submits each job for the task's OS identity (``sbatch --uid
--gid``): Slurm lists, accounts and limits it as that user's, and its bubblewrap runs as them
(docs/security.md, "OS identities"). An identity without an account on this host, or a data
dir without ACLs, is submitted by the master's user and dropped to inside, as before.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from determined.master.experiment import Experiments
from determined.master.resources import _envs, _identity, _launcher, _recovery
from determined.master.resources import _slurm_jobs as jobs
from determined.master.resources._backend import STOP_GRACE_S, Run
from determined.master.resources._local import local_slots
from determined.master.resources._log_capture import LogSink
from determined.master.resources._manager import Manager
from determined.master.resources._slurm_jobs import JOB_PREFIX, SlurmConfig, SlurmJob
from determined.master.store import Store, TrialRow, _experiments, _trials, _users
from determined.master.store import _tasks as _task_rows

logger = logging.getLogger("determined.master")


class SlurmBackend:
    """Runs trials, commands and generic tasks as Slurm jobs (see ``_manager.Backend``);
    TensorBoards run beside the master as local process groups."""

    # Tasks that run as Slurm jobs; TensorBoards run beside the master (no slot, and they read
    # only the synced event files), notebooks and shells not at all (see task_refusal).
    SLURM_TASKS = ("COMMAND", "GENERIC")

    def __init__(self, manager: Manager, config: SlurmConfig) -> None:
        self._m = manager
        self._config = config
        local_slots(manager, None, None)  # until Slurm's nodes are read, at start
        self.gpu = config.gpu
        self._jobs: dict[str, SlurmJob] = {}  # allocation id -> a trial's job
        self._task_jobs: dict[str, SlurmJob] = {}  # task id -> the job of a command or task
        self._blocked: set[str] = set()  # nodes disabled when this tick began
        # Every job's comment: this master's jobs are found by it, whoever they run as.
        self._tag = f"det:{manager.store.cluster_id}"

    def recover(self) -> None:
        """Adopt the jobs of live allocations and tasks still in Slurm; close the others."""
        m = self._m
        if m.sandbox.active and _identity.applies():
            default = m.sandbox.default_task
            if default == _identity.DEFAULT_TASK:  # Slurm runs jobs only for host accounts
                for done in _identity.ensure_account(default):
                    logger.warning("default task account: %s", done)
        with m.store.read() as conn:
            stale = {str(a["id"]): a for a in _trials.live_allocations(conn)}
        try:
            known = jobs.job_states(self._tag)
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            logger.error("cannot ask Slurm for its jobs: %s", e)
            known = {}
        for allocation_id, row in stale.items():
            name = JOB_PREFIX + allocation_id
            if name in known and known[name][1] in jobs.ACTIVE:
                self._adopt(allocation_id, row, known[name][0])
            else:
                code = self._final_code(known, allocation_id)
                m.exits[allocation_id] = (code, code == -1)
        m.record_exits()
        self._adopt_task_jobs(known)
        m.tasks.end_stale(keep=set(m.tasks.runs))
        _recovery.remove_staging(m.store)
        self._load_nodes()

    def _final_code(self, known: dict[str, tuple[str, str, str]], allocation_id: str) -> int:
        """The exit code of a job that ended while no master watched it (-1: unknown)."""
        name = JOB_PREFIX + allocation_id
        work = self._m.work_root / allocation_id
        if name in known:
            return jobs.finished_exit_code(known[name][0], work / "exit_code")
        return jobs.exit_file_code(work)

    def _load_nodes(self) -> None:
        """Slurm's nodes as the agents (kept as they were when ``sinfo`` fails)."""
        try:
            nodes = jobs.slurm_nodes(self.gpu)
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as e:
            logger.error("cannot list the Slurm nodes: %s", e)
            return
        if not nodes:
            return
        agents, first = [], 0
        for _, count in nodes:
            agents.append(list(range(first, first + count)))
            first += count
        self._m.agent_ids = [name for name, _ in nodes]
        self._m.agents = agents
        if not self.gpu:  # the cluster's CPUs; GPU capacity stays Slurm's to decide
            self._m.slots = [s for a in agents for s in a]

    def knows_pool(self, name: str) -> bool:
        """A pool is a Slurm partition here: Slurm itself refuses one it lacks, at sbatch."""
        return bool(name)

    def task_refusal(self, kind: str) -> str | None:
        if kind in ("NOTEBOOK", "SHELL"):
            return (
                f"{kind.lower()}s do not run on the Slurm resource manager: their service "
                "listens on the node that runs it, which the master's proxy cannot reach. Run "
                "`det cmd run` for batch work, or start a master with the local resource "
                "manager for notebooks and shells"
            )
        return None

    def capacity(self) -> int:
        """Slots of the whole cluster (CPUs, or a large number for GPUs: Slurm decides)."""
        if self._config.gpu:
            return 1 << 20
        try:
            out = jobs.slurm_cmd(["sinfo", "-h", "-o", "%C"])
            return int(out.stdout.split("/")[-1])
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return 1 << 20

    def occupancy(self) -> dict[int, str]:
        """Slot -> allocation: a running job holds its first ``per_node`` slots of each of its
        nodes."""
        m = self._m
        taken: dict[int, str] = {}
        where = dict(zip(m.agent_ids, m.agents, strict=True))
        running = [*self._jobs.items()]
        running += [(m.tasks.runs[t].allocation_id, j) for t, j in self._task_jobs.items()]
        for allocation_id, job in running:
            if job.state != "RUNNING" or not job.nodes:
                continue
            for node in jobs.expand_hostlist(job.nodes):
                free = [s for s in where.get(node, []) if s not in taken]
                for slot in free[: job.per_node]:
                    taken[slot] = allocation_id
        return taken

    def _adopt(self, allocation_id: str, row: Any, job_id: str) -> None:
        m = self._m
        sink = LogSink(m.logs, str(row["task_id"]), allocation_id)
        job = SlurmJob(job_id, m.work_root / allocation_id, sink)
        job.skip_written()
        self._jobs[allocation_id] = job
        timeout = 3600.0
        try:
            with m.store.read() as conn:
                trial = _trials.require_trial(conn, row["trial_id"])
                exp = _experiments.require_experiment(conn, trial["experiment_id"])
            timeout = float(exp["config"].get("preemption_timeout") or timeout)
        except Exception:  # the default is safe: the job itself is adopted regardless
            logger.exception("cannot read the preemption timeout of %s", allocation_id)
        m.runs[allocation_id] = _job_run(job, sink, timeout)
        sink.master(f"the restarted master adopted Slurm job {job_id}")
        logger.warning("adopted Slurm job %s of allocation %s", job_id, allocation_id)

    # ----------------------------------------------------------------- each tick

    def poll(self) -> None:
        """Every job's state from one ``squeue``; a queued trial's allocation is PENDING, a
        task whose job started is RUNNING."""
        if not (self._jobs or self._task_jobs):
            return
        known = jobs.job_states(self._tag)
        for allocation_id, job in list(self._jobs.items()):
            job.update(known, JOB_PREFIX + allocation_id)
            if job.code is not None:
                del self._jobs[allocation_id]
            else:
                self._record_queued(allocation_id, job)
        for task_id, job in list(self._task_jobs.items()):
            job.update(known, JOB_PREFIX + self._m.tasks.runs[task_id].allocation_id)
            if job.code is not None:
                del self._task_jobs[task_id]  # its run is reaped next (TaskRuns.reap)
            elif job.state != "PENDING" and not job.recorded:
                self._record_task_running(task_id)
                job.recorded = "RUNNING"

    def _record_queued(self, allocation_id: str, job: SlurmJob) -> None:
        """A job Slurm still queues is a PENDING allocation (its trial shows QUEUED, as a
        trial waiting for slots does); RUNNING once Slurm starts it."""
        state = "RUNNING" if job.state != "PENDING" else "PENDING"
        if state == job.recorded:
            return
        waiting = state == "PENDING"
        self._m.store.write(
            lambda conn: _trials.set_allocation_waiting(conn, allocation_id, waiting)
        )
        job.recorded = state

    def kill(self, allocation_id: str, run: Run) -> None:
        """A running trial is first asked to checkpoint and exit through its preemption path
        (the allocation is flagged preempted: its long poll answers at once); ``scancel``
        (Slurm's SIGTERM to the srun steps, SIGKILL after ``KillWait``) follows after
        ``KILL_GRACE_S``, at once for a job still queued."""
        job = self._jobs.get(allocation_id)
        if job is None or job.state == "PENDING":
            run.signal(signal.SIGKILL)
            return
        try:
            self._m.exps.preempt(allocation_id)
        except Exception:  # gone already: the scancel below still ends the job
            logger.exception("cannot flag allocation %s preempted", allocation_id)
        timer = threading.Timer(jobs.KILL_GRACE_S, run.signal, args=(signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    def doomed(self) -> set[str]:
        """The jobs running on a node disabled without draining."""
        if not self._jobs:
            return set()
        _, doomed = self._m.agent_blocks()
        return {
            allocation_id
            for allocation_id, job in self._jobs.items()
            if job.nodes and doomed.intersection(jobs.expand_hostlist(job.nodes))
        }

    def plan(self) -> None:
        self._blocked = self._m.agent_blocks()[0]

    def run_trial(self, trial: TrialRow, need: int) -> None:
        """Submit the trial's run as a job: ``slurm.slots_per_node`` slots on each of as many
        nodes as it takes (all ``need`` on one node by default)."""
        m = self._m
        with m.store.read() as conn:
            exp = _experiments.require_experiment(conn, trial["experiment_id"])
        cfg = exp["config"]
        slurm = cfg.get("slurm") or {}
        per_node = int(slurm.get("slots_per_node") or need)
        nodes = max(1, math.ceil(need / per_node))
        if self._blocked and len(m.agent_ids) - len(self._blocked) < nodes:
            return  # too few enabled nodes: it waits until one is enabled again
        containers = [list(range(min(per_node, need - i * per_node))) for i in range(nodes)]
        resources = [
            {"resourcesId": str(i), "address": "127.0.0.1", "slots": len(c)}
            for i, c in enumerate(containers)
        ]
        allocated = m.allocate(int(trial["id"]), resources)
        if allocated is None:
            return
        alloc, token = allocated
        allocation_id = str(alloc["id"])
        sink = LogSink(m.logs, str(alloc["task_id"]), allocation_id)
        work = m.work_root / allocation_id
        try:
            spec, identity = m.launch_spec(alloc, token, containers)
            job_id = self._sbatch(spec, work, cfg, sink, identity)
        except Exception as e:
            m.launch_failed(allocation_id, sink, e)
            return
        job = SlurmJob(job_id, work, sink)
        job.per_node = per_node
        self._jobs[allocation_id] = job
        timeout = float(cfg.get("preemption_timeout") or 3600)
        m.runs[allocation_id] = _job_run(job, sink, timeout, port_offset=spec.port_offset)
        sink.master(
            f"Resources for Trial {spec.trial_id} (Experiment {spec.experiment_id}) were "
            f"submitted as Slurm job {job_id} ({nodes} node(s), {need} slot(s))"
        )

    def _sbatch(
        self,
        spec: _launcher.LaunchSpec,
        work: Path,
        cfg: dict[str, Any],
        sink: LogSink,
        identity: _identity.Identity | None = None,
    ) -> str:
        m = self._m
        work.mkdir(parents=True, exist_ok=True)
        # The experiment's own Python environment (``_envs``), on the shared data dir.
        environment = _envs.ensure(m.env_root, spec.experiment_id)
        for i in range(len(spec.containers)):
            cwork = work / str(i)
            _launcher.prepare_work_dir(cwork, spec, m.sandbox.active)
            env = _launcher.trial_env(spec, m.master_url, m.store.cluster_id, cwork, i)
            env["DET_RESOURCES_TYPE"] = "slurm-job"
            env["DET_AGENT_ID"] = "slurm"
            _envs.activate(env, environment)
            jobs.write_env(work / f"env.{i}", env)
        python = str(_envs.python_of(environment))
        # Each rank runs in its own work/<rank> (the batch script's cd): the sandbox binds
        # them all, and keeps that directory.
        wrap, user = self._wrap_for(cfg, work, environment, identity, sink)
        return jobs.submit(
            self._config,
            work,
            wrap(_launcher.with_startup_hook(_launcher.command(python), m.startup_hook_of(cfg))),
            name=spec.allocation_id,
            nodes=len(spec.containers),
            per_node=len(spec.containers[0]),
            cfg=cfg,
            exclude=self._blocked,
            tag=self._tag,
            user=user,
        )

    def _wrap_for(
        self,
        cfg: dict[str, Any],
        work: Path,
        environment: Path,
        identity: _identity.Identity | None,
        sink: LogSink,
    ) -> tuple[Callable[[list[str]], list[str]], tuple[int, int] | None]:
        """The sandbox of a job's process, and whom the job is submitted for: the task's
        identity when it has an account on this host (Slurm needs one) and its paths can be
        opened to it (ACLs); else the master's user, and the sandbox drops to the identity
        inside (the task's log says why)."""
        m = self._m
        if identity is None or identity.uid == os.geteuid():
            return m.sandbox_for(cfg, work, environment, chdir=False, identity=identity), None
        why = "" if _identity.host_account(identity) else "no account on this host"
        if not why:
            try:
                wrap = m.sandbox_for(
                    cfg, work, environment, chdir=False, identity=identity, submitted=True
                )
                return wrap, (identity.uid, identity.gid)
            except OSError as e:
                why = f"cannot open its paths to it ({e})"
        sink.master(
            f"the job is submitted by the master's user, not for uid {identity.uid} "
            f"({identity.user}): {why}; its sandbox runs the task as that uid"
        )
        return m.sandbox_for(cfg, work, environment, chdir=False, identity=identity), None

    # ------------------------------------------------------------ non-trial tasks

    def schedule_tasks(self) -> None:
        """Submit every queued command and generic task as a Slurm job at once (Slurm queues
        them); TensorBoards start here, as on the local resource manager."""
        m = self._m
        with m.store.read() as conn:
            queued = [t for t in _task_rows.queued(conn) if str(t["id"]) not in m.tasks.runs]
        if queued:
            self._blocked = m.agent_blocks()[0]
        for task in queued:
            if m.stopping.is_set():
                return
            if task["type"] in self.SLURM_TASKS:
                self._submit_task(task)
            else:
                m.tasks.launch(task, [])

    def _submit_task(self, task: dict[str, Any]) -> None:
        m = self._m
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        sink = LogSink(m.logs, task_id, allocation_id)
        work = m.work_root / allocation_id
        slots = int(task["slots"])
        try:
            identity = m.tasks.identity(task)
            work.mkdir(parents=True, exist_ok=True)
            launch = m.tasks.prepare(task, work / "0", list(range(slots)))
            launch.env.update(DET_RESOURCES_TYPE="slurm-job", DET_AGENT_ID="slurm")
            if self.gpu:
                launch.env.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm's gres sets it
            jobs.write_env(work / "env.0", launch.env)
            cfg = dict(task["config"] or {})
            environment = _envs.task_env_dir(m.env_root, task_id)
            wrap, user = self._wrap_for(cfg, work, environment, identity, sink)
            argv = wrap(_launcher.with_startup_hook(launch.argv, m.startup_hook_of(cfg)))
            job_id = jobs.submit(
                self._config,
                work,
                argv,
                name=allocation_id,
                nodes=1,
                per_node=slots,
                cfg=cfg,
                exclude=self._blocked,
                tag=self._tag,
                user=user,
            )
        except Exception as e:
            m.tasks.not_started(task, sink, work, e)
            return
        job = SlurmJob(job_id, work, sink)
        job.per_node = slots
        self._task_jobs[task_id] = job
        m.tasks.runs[task_id] = _job_run(job, sink, STOP_GRACE_S, allocation_id)
        sink.master(f"Resources for {task['description']} were submitted as Slurm job {job_id}")

    def _record_task_running(self, task_id: str) -> None:
        """Slurm started the task's job: the task is RUNNING (QUEUED until then)."""
        allocation_id = self._m.tasks.runs[task_id].allocation_id
        self._m.store.write(lambda conn: _task_rows.set_running(conn, task_id, allocation_id, {}))

    def _adopt_task_jobs(self, known: dict[str, tuple[str, str, str]]) -> None:
        """Jobs of commands and tasks that outlived the previous master are adopted; a live
        task whose job ended meanwhile is ended with its exit code (never submitted twice)."""
        m = self._m
        with m.store.read() as conn:
            live = [t for t in _task_rows.live(conn) if t["type"] in self.SLURM_TASKS]
        for task in live:
            task_id = str(task["id"])
            allocation_id = _task_rows.allocation_of(task)
            name = JOB_PREFIX + allocation_id
            work = m.work_root / allocation_id
            sink = LogSink(m.logs, task_id, allocation_id)
            if name in known and known[name][1] in jobs.ACTIVE:
                job = SlurmJob(known[name][0], work, sink)
                job.skip_written()
                job.recorded = "RUNNING" if task["state"] == "RUNNING" else ""
                self._task_jobs[task_id] = job
                m.tasks.runs[task_id] = _job_run(job, sink, STOP_GRACE_S, allocation_id)
                sink.master(f"the restarted master adopted Slurm job {job.job_id}")
                continue
            submitted = name in known or (work / "exit_code").exists()
            if task["state"] == "QUEUED" and not submitted:
                continue  # never submitted: it is, on the first tick
            code = self._final_code(known, allocation_id)
            status = f"exited with code {code}" if code >= 0 else "the master restarted"
            sink.master(f"task {task_id} {status} while the master was down")
            with m.store.tx() as conn:
                _task_rows.end_run(conn, task_id, status)
                _users.revoke_allocation_tokens(conn, allocation_id)
        m.logs.flush()


def _job_run(
    job: SlurmJob, sink: LogSink, timeout: float, allocation_id: str = "", port_offset: int = 0
) -> Run:
    """A run whose one container is the Slurm job (holding no slots of the manager's: Slurm
    accounts for them); it outlives the master."""
    return Run(
        [job],
        sink,
        [],
        timeout,
        port_offset=port_offset,
        allocation_id=allocation_id,
        detached=True,
    )


class SlurmResourceManager(Manager):
    """A :class:`~_manager.Manager` over a :class:`SlurmBackend`: runs the trials of
    ``experiments`` as Slurm jobs (``SLURM_CONF`` etc. come from the master's environment).
    ``config``: the master config's ``resource_manager`` section; ``common``: ``Manager``'s
    (``master_url``, ``work_root``, ``log_hook``, ``sandbox``)."""

    def __init__(
        self, store: Store, experiments: Experiments, *, config: SlurmConfig, **common: Any
    ) -> None:
        super().__init__(store, experiments, **common)
        self.backend = SlurmBackend(self, config)
