"""The Slurm resource manager: each trial allocation is one Slurm batch job.

It is the local resource manager's loop (reap, record exits, enforce kills and preemption
timeouts, schedule) with Slurm doing the placing and queueing: every runnable trial is
submitted at once with ``sbatch``; its batch script starts the trial with ``srun`` (one task
per node), so that ``scancel --signal`` reaches the trial's processes. A job's state comes
from ``squeue`` while it is known there, then from ``scontrol show job`` (kept ~5 minutes)
or the exit code the batch script wrote. The job's output file is copied into the trial's
task logs as it grows. Jobs are named ``det-<allocation id>``: a restarted master adopts the
ones still queued or running (no trial lost or started twice). The work dirs must be on a
filesystem every node sees (here: one host).

Slurm's nodes are the agents (``sinfo``; their CPUs, or GPUs from the gres, are the slots): a
node disabled (or with a disabled slot: Slurm places whole tasks) gets no new job (``sbatch
--exclude``; a job waits while too few nodes are left), and without draining the jobs running
on it are killed (the trial runs again elsewhere).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import shlex
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from determined.master._errors import ApiError
from determined.master.experiment import Experiments
from determined.master.resources import (
    _envs,
    _identity,
    _launcher,
    _local,
    _queue,
    _recovery,
    _sandbox,
)
from determined.master.resources._log_capture import LogHook, LogSink
from determined.master.store import Store, _experiments, _trials, _users
from determined.master.store import _tasks as _task_rows

logger = logging.getLogger("determined.master")
JOB_PREFIX = "det-"
# Slurm job states after which the job runs no more.
_ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
KILL_GRACE_S = 10.0  # after a kill's SIGTERM, the trial has this long before scancel


class SlurmConfigError(ValueError):
    """A bad ``resource_manager: {type: slurm}`` section."""


@dataclasses.dataclass
class SlurmConfig:
    """``resource_manager`` of the master config with ``type: slurm`` (0.37's field names)."""

    slots_type: str = "cpu"  # "cpu" or "cuda"/"gpu"
    gres_supported: bool = True
    default_compute_resource_pool: str | None = None
    partition_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    sbatch_args: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> SlurmConfig:
        """Raises SlurmConfigError naming the bad key."""
        known = {f.name for f in dataclasses.fields(cls)} | {"type"}
        unknown = sorted(str(k) for k in raw if k not in known)
        if unknown:
            raise SlurmConfigError(
                f"resource_manager: unknown keys {', '.join(unknown)}; allowed: "
                f"{', '.join(sorted(known))}"
            )
        out = cls(**{k: v for k, v in raw.items() if k != "type"})
        if not isinstance(out.gres_supported, bool):
            raise SlurmConfigError("resource_manager.gres_supported must be true or false")
        if not isinstance(out.sbatch_args, list):
            raise SlurmConfigError("resource_manager.sbatch_args must be a list of strings")
        if out.slots_type not in ("cpu", "cuda", "gpu"):
            raise SlurmConfigError(
                f"resource_manager.slots_type must be cpu or cuda, not {out.slots_type!r}"
            )
        if not isinstance(out.partition_overrides, dict):
            raise SlurmConfigError("resource_manager.partition_overrides must be a mapping")
        return out

    @property
    def gpu(self) -> bool:
        return self.slots_type in ("cuda", "gpu")


def _slurm(args: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def job_states(prefix: str = JOB_PREFIX) -> dict[str, tuple[str, str, str]]:
    """``job name -> (job id, state, where)`` of this user's jobs squeue knows: ``where`` is
    the node list of a job that has nodes, else why it waits in parentheses (``(Resources)``,
    ``(Priority)``: squeue's ``%R``)."""
    out = _slurm(["squeue", "-h", "-u", str(os.getuid()), "-o", "%j|%i|%T|%R"])
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed: {out.stderr.strip()}")
    jobs = {}
    for line in out.stdout.splitlines():
        name, job_id, state, nodes = (line.split("|") + ["", "", "", ""])[:4]
        if name.startswith(prefix):
            jobs[name] = (job_id, state, nodes)
    return jobs


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed node list as names: ``n[1-3,05],gpu1`` -> n1 n2 n3 05 gpu1 (one
    bracket group per name, zero padding kept)."""
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,]*)?", text.strip()):
        m = re.fullmatch(r"(?P<pre>[^\[]*)\[(?P<ranges>[^\]]*)\](?P<post>.*)", item)
        if m is None:
            names.append(item)
            continue
        for part in m["ranges"].split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{m['pre']}{i:0{width}d}{m['post']}")
    return names


def _gres_gpus(gres: str) -> int:
    """GPUs in a node's gres (``gpu:2``, ``gpu:a100:4(S:0-1)``); 0 without any."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def slurm_nodes(gpu: bool) -> list[tuple[str, int]]:
    """``(node, slots)`` per Slurm node, in ``sinfo``'s order (a node in several partitions
    once); slots are its CPUs, or its GPUs when ``gpu``."""
    out = _slurm(["sinfo", "-h", "-N", "-o", "%N|%c|%G"])
    if out.returncode != 0:
        raise RuntimeError(f"sinfo failed: {out.stderr.strip()}")
    nodes: dict[str, int] = {}
    for line in out.stdout.splitlines():
        name, cpus, gres = (line.strip().split("|") + ["", "", ""])[:3]
        if name and name not in nodes:
            nodes[name] = _gres_gpus(gres) if gpu else int(cpus or 0)
    return list(nodes.items())


def finished_exit_code(job_id: str, exit_file: Path) -> int:
    """A finished job's exit code: the trial's own (the batch script wrote it), else
    ``scontrol``'s (a signal counts as 128 + its number), else -1."""
    try:
        return int(exit_file.read_text().strip())
    except (OSError, ValueError):
        pass
    out = _slurm(["scontrol", "-o", "show", "job", job_id])
    for field in out.stdout.split():
        if field.startswith("ExitCode="):
            code, _, sig = field[len("ExitCode=") :].partition(":")
            if sig and sig != "0":
                return 128 + int(sig)
            return int(code)
    return -1


class SlurmJob:
    """One allocation as a Slurm job; stands where the local manager has a process group
    (``poll``, ``signal_group``, ``finish``)."""

    def __init__(self, job_id: str, work_dir: Path, sink: LogSink) -> None:
        self.job_id = job_id
        self.pid = int(job_id)
        self.work_dir = work_dir
        self.state = "PENDING"
        self.nodes = ""
        self.per_node = 1  # slots it has on each of its nodes
        self.code: int | None = None
        self.reason = ""  # why Slurm keeps it PENDING (squeue's reason), while it does
        self.recorded = ""  # the allocation state last written for it (PENDING or RUNNING)
        self._sink = sink
        self._offset = 0
        self._announced = False

    @property
    def output(self) -> Path:
        return self.work_dir / "slurm.out"

    def update(self, known: dict[str, tuple[str, str, str]], name: str) -> None:
        """Take the job's state from a ``job_states`` answer; copy new output lines."""
        self.copy_output()
        if self.code is not None:
            return
        if name in known and known[name][1] in _ACTIVE:
            _, self.state, where = known[name]
            waiting = where.startswith("(")
            self.nodes = "" if waiting else where
            reason = where.strip("()") if waiting and self.state == "PENDING" else ""
            if reason and reason != self.reason:
                self._sink.master(f"Slurm job {self.job_id} is queued (reason: {reason})")
            self.reason = reason
            if self.state == "RUNNING" and not self._announced:
                self._announced = True
                self._sink.master(f"Slurm job {self.job_id} is running on {self.nodes}")
            return
        self.code = finished_exit_code(self.job_id, self.work_dir / "exit_code")
        self.state = "DONE"
        self.copy_output()

    def copy_output(self) -> None:
        try:
            with self.output.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        if not end:
            return
        self._offset += end
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            if line:
                self._sink.line(line, stdtype="stdout")

    def poll(self) -> int | None:
        return self.code

    def signal_group(self, sig: int = signal.SIGKILL) -> None:
        """``scancel --signal`` (reaches the srun steps: the trial); SIGKILL cancels the job
        (Slurm's SIGTERM, then SIGKILL after ``KillWait``)."""
        if self.code is not None:
            return
        if sig == signal.SIGKILL or self.state == "PENDING":
            args = ["scancel", self.job_id]
        else:
            args = ["scancel", f"--signal={signal.Signals(sig).name[3:]}", self.job_id]
        try:
            _slurm(args, timeout=10)
        except subprocess.TimeoutExpired:
            logger.warning("%s timed out", " ".join(args))

    def finish(self, timeout: float = 5.0) -> None:
        self.copy_output()


_WRAPPER = """#!/bin/bash
# One task per node: source this task's environment, run the trial in its work dir (the
# argv sources the startup hook, inside the task's sandbox).
set -a
. "{work}/env.$SLURM_PROCID"
set +a
cd "{work}/$SLURM_PROCID"
exec {argv}
"""

_BATCH = """#!/bin/bash
srun --kill-on-bad-exit=1 --ntasks={ntasks} --ntasks-per-node=1 bash "{work}/task.sh"
code=$?
echo $code > "{work}/exit_code"
exit $code
"""


class SlurmResourceManager(_local.LocalResourceManager):
    """Runs the trials of ``experiments`` as Slurm jobs (``SLURM_CONF`` etc. come from the
    master's environment)."""

    # Tasks that run as Slurm jobs; TensorBoards run beside the master (no slot, and they read
    # only the synced event files), notebooks and shells not at all (see task_refusal).
    SLURM_TASKS = ("COMMAND", "GENERIC")

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

    def __init__(
        self,
        store: Store,
        experiments: Experiments,
        *,
        master_url: str,
        work_root: Path,
        config: SlurmConfig,
        log_hook: LogHook | None = None,
        sandbox: _sandbox.Sandbox | None = None,
    ) -> None:
        self._slurm_config = config
        super().__init__(
            store,
            experiments,
            master_url=master_url,
            work_root=work_root,
            log_hook=log_hook,
            sandbox=sandbox,
        )
        self.gpu = config.gpu
        self._jobs: dict[str, SlurmJob] = {}
        self._task_jobs: dict[str, SlurmJob] = {}  # task id -> the job of a command or task
        self._blocked: set[str] = set()  # nodes disabled when this tick began

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Adopt the jobs of live allocations still in Slurm; close the others."""
        with self._store.read() as conn:
            stale = {str(a["id"]): a for a in _trials.live_allocations(conn)}
        try:
            known = job_states()
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            logger.error("cannot ask Slurm for its jobs: %s", e)
            known = {}
        for allocation_id, row in stale.items():
            name = JOB_PREFIX + allocation_id
            if name in known and known[name][1] in _ACTIVE:
                self._adopt(allocation_id, row, known[name][0])
            else:
                work = self._work_root / allocation_id
                code = (
                    finished_exit_code(known[name][0], work / "exit_code")
                    if name in known
                    else _exit_file_code(work)
                )
                self._exits[allocation_id] = (code, code == -1)
        self._record_exits()
        self._adopt_task_jobs(known)
        self._end_stale_tasks(keep=set(self._task_runs))
        _recovery.remove_staging(self._store)
        self._load_nodes()
        self._thread.start()

    def _load_nodes(self) -> None:
        """Slurm's nodes as the agents (kept as they were when ``sinfo`` fails)."""
        try:
            nodes = slurm_nodes(self.gpu)
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as e:
            logger.error("cannot list the Slurm nodes: %s", e)
            return
        if not nodes:
            return
        agents, first = [], 0
        for _, count in nodes:
            agents.append(list(range(first, first + count)))
            first += count
        self.agent_ids = [name for name, _ in nodes]
        self.agents = agents
        if not self.gpu:  # the cluster's CPUs; GPU capacity stays Slurm's to decide
            self.slots = [s for a in agents for s in a]

    def node_blocks(self) -> tuple[set[str], set[str]]:
        """``(blocked, doomed)`` nodes: those that take no new job (the node or a slot of it
        disabled), and those whose running jobs are killed (disabled without draining)."""
        agents, slots = self.toggles()
        blocked, doomed = set(), set()
        for node, node_slots in zip(self.agent_ids, self.agents, strict=True):
            for toggle in [agents[node], *(slots[s] for s in node_slots)]:
                if not toggle.enabled:
                    blocked.add(node)
                    if not toggle.draining:
                        doomed.add(node)
        return blocked, doomed

    def occupancy(self) -> dict[int, str]:
        """Slot -> allocation: a running job holds its first ``per_node`` slots of each of its
        nodes."""
        taken: dict[int, str] = {}
        where = dict(zip(self.agent_ids, self.agents, strict=True))
        jobs = [*self._jobs.items()]
        jobs += [(self._task_runs[t].allocation_id, j) for t, j in self._task_jobs.items()]
        for allocation_id, job in jobs:
            if job.state != "RUNNING" or not job.nodes:
                continue
            for node in expand_hostlist(job.nodes):
                free = [s for s in where.get(node, []) if s not in taken]
                for slot in free[: job.per_node]:
                    taken[slot] = allocation_id
        return taken

    def _adopt(self, allocation_id: str, row: Any, job_id: str) -> None:
        sink = LogSink(self._logs, str(row["task_id"]), allocation_id)
        job = SlurmJob(job_id, self._work_root / allocation_id, sink)
        job._offset = job.output.stat().st_size if job.output.exists() else 0
        self._jobs[allocation_id] = job
        timeout = 3600.0
        try:
            with self._store.read() as conn:
                trial = _trials.require_trial(conn, row["trial_id"])
                exp = _experiments.require_experiment(conn, trial["experiment_id"])
            timeout = float(exp["config"].get("preemption_timeout") or timeout)
        except Exception:  # the default is safe: the job itself is adopted regardless
            logger.exception("cannot read the preemption timeout of %s", allocation_id)
        self._runs[allocation_id] = _job_run(job, sink, timeout)
        sink.master(f"the restarted master adopted Slurm job {job_id}")
        logger.warning("adopted Slurm job %s of allocation %s", job_id, allocation_id)

    def _local_task_runs(self) -> dict[str, _local._Run]:
        """The tasks that run here, beside the master (TensorBoards), not as Slurm jobs."""
        return {t: r for t, r in self._task_runs.items() if t not in self._task_jobs}

    def terminate_all(self) -> None:
        """The master is stopping: Slurm jobs keep running (a restarted master adopts them);
        the tasks running beside it get SIGTERM."""
        self._stopping.set()
        for run in self._local_task_runs().values():
            run.signal(signal.SIGTERM)

    def stop(self) -> None:
        self._halt()
        for job in [*self._jobs.values(), *self._task_jobs.values()]:
            job.copy_output()
        local = self._local_task_runs()
        self._wind_down(list(local.values()), list(local))
        self._logs.close()

    def capacity(self) -> int:
        """Slots of the whole cluster (CPUs, or a large number for GPUs: Slurm decides)."""
        if self._slurm_config.gpu:
            return 1 << 20
        try:
            out = _slurm(["sinfo", "-h", "-o", "%C"])
            return int(out.stdout.split("/")[-1])
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return 1 << 20

    # ----------------------------------------------------------------- the loop

    def _reap(self) -> None:
        if self._jobs or self._task_jobs:
            known = job_states()
            for allocation_id, job in list(self._jobs.items()):
                job.update(known, JOB_PREFIX + allocation_id)
                if job.code is not None:
                    del self._jobs[allocation_id]
                else:
                    self._record_queued(allocation_id, job)
            for task_id, job in list(self._task_jobs.items()):
                job.update(known, JOB_PREFIX + self._task_runs[task_id].allocation_id)
                if job.code is not None:
                    del self._task_jobs[task_id]  # its run is reaped next (_reap_tasks)
                elif job.state != "PENDING" and not job.recorded:
                    self._record_task_running(task_id)
                    job.recorded = "RUNNING"
        super()._reap()

    def _record_queued(self, allocation_id: str, job: SlurmJob) -> None:
        """A job Slurm still queues is a PENDING allocation (its trial shows QUEUED, as a
        trial waiting for slots does); RUNNING once Slurm starts it."""
        state = "RUNNING" if job.state != "PENDING" else "PENDING"
        if state == job.recorded:
            return
        waiting = state == "PENDING"
        self._store.write(lambda conn: _trials.set_allocation_waiting(conn, allocation_id, waiting))
        job.recorded = state

    def _kill(self, run: _local._Run, reason: str) -> None:
        """A running trial is first asked to checkpoint and exit through its preemption path
        (the allocation is flagged preempted: its long poll answers at once); ``scancel``
        (Slurm's SIGTERM to the srun steps, SIGKILL after ``KillWait``) follows after
        ``KILL_GRACE_S``, at once for a job still queued."""
        if run.killed:
            return
        run.sink.master(f"forcibly killing allocation's remaining resources (reason: {reason})")
        run.killed = True
        allocation_id = next((a for a, r in self._runs.items() if r is run), None)
        job = self._jobs.get(allocation_id or "")
        if allocation_id is not None and job is not None and job.state != "PENDING":
            try:
                self._exps.preempt(allocation_id)
            except Exception:  # gone already: the scancel below still ends the job
                logger.exception("cannot flag allocation %s preempted", allocation_id)
            timer = threading.Timer(KILL_GRACE_S, run.signal, args=(signal.SIGKILL,))
            timer.daemon = True
            timer.start()
        else:
            run.signal(signal.SIGKILL)
        self._wake.set()

    def _enforce(self) -> None:
        """As the local manager's, and kill the jobs on nodes disabled without draining."""
        super()._enforce()
        if not self._jobs:
            return
        _, doomed = self.node_blocks()
        for allocation_id, job in list(self._jobs.items()):
            run = self._runs.get(allocation_id)
            if run is None or run.killed or not job.nodes:
                continue
            if doomed.intersection(expand_hostlist(job.nodes)):
                self._kill(run, "its agent or slot was disabled")

    def _schedule(self) -> None:
        with self._store.read() as conn:
            runnable = _queue.runnable_in_order(conn)
        self._blocked = self.node_blocks()[0] if runnable else set()
        for trial in runnable:
            if self._stopping.is_set():
                return
            try:
                need = self._slots_needed(trial)
            except Exception:
                logger.exception("cannot schedule trial %s", trial["id"])
                continue
            if need is None:
                continue
            self._submit(trial, need)

    def _submit(self, trial: Any, need: int) -> None:
        with self._store.read() as conn:
            exp = _experiments.require_experiment(conn, trial["experiment_id"])
        cfg = exp["config"]
        slurm = cfg.get("slurm") or {}
        per_node = int(slurm.get("slots_per_node") or need)
        nodes = max(1, math.ceil(need / per_node))
        if self._blocked and len(self.agent_ids) - len(self._blocked) < nodes:
            return  # too few enabled nodes: it waits until one is enabled again
        containers = [list(range(min(per_node, need - i * per_node))) for i in range(nodes)]
        resources = [
            {"resourcesId": str(i), "address": "127.0.0.1", "slots": len(c)}
            for i, c in enumerate(containers)
        ]
        try:
            alloc, token = self._exps.allocate(int(trial["id"]), resources)
        except ApiError:
            return
        except Exception:
            logger.exception("cannot allocate trial %s", trial["id"])
            return
        allocation_id = str(alloc["id"])
        sink = LogSink(self._logs, str(alloc["task_id"]), allocation_id)
        work = self._work_root / allocation_id
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
            job_id = self._sbatch(spec, work, cfg, identity)
        except Exception as e:
            if not isinstance(e, _launcher.LaunchError):
                logger.exception("submitting allocation %s failed", allocation_id)
            sink.master(f"crashed: {_launcher.describe(e)}")
            self._logs.flush()
            self._exits[allocation_id] = (1, False)
            self._record_exits()
            return
        job = SlurmJob(job_id, work, sink)
        job.per_node = per_node
        self._jobs[allocation_id] = job
        timeout = float(cfg.get("preemption_timeout") or 3600)
        self._runs[allocation_id] = _job_run(job, sink, timeout, port_offset=spec.port_offset)
        sink.master(
            f"Resources for Trial {spec.trial_id} (Experiment {spec.experiment_id}) were "
            f"submitted as Slurm job {job_id} ({nodes} node(s), {need} slot(s))"
        )

    def partition(self, config: dict[str, Any]) -> str | None:
        """The experiment's resource pool is a partition (default: the master's
        ``default_compute_resource_pool``, else Slurm's default partition)."""
        pool = (config.get("resources") or {}).get("resource_pool") or (
            self._slurm_config.default_compute_resource_pool
        )
        return str(pool) if pool else None

    def _sbatch(
        self,
        spec: _launcher.LaunchSpec,
        work: Path,
        cfg: dict[str, Any],
        identity: _identity.Identity | None = None,
    ) -> str:
        work.mkdir(parents=True, exist_ok=True)
        # The experiment's own Python environment (``_envs``), on the shared data dir.
        environment = _envs.ensure(self._env_root, spec.experiment_id)
        for i in range(len(spec.containers)):
            cwork = work / str(i)
            _launcher.prepare_work_dir(cwork, spec)
            env = _launcher.trial_env(spec, self._master_url, self._store.cluster_id, cwork, i)
            env["DET_RESOURCES_TYPE"] = "slurm-job"
            env["DET_AGENT_ID"] = "slurm"
            _envs.activate(env, environment)
            _write_env(work / f"env.{i}", env)
        python = str(_envs.python_of(environment))
        # Each rank runs in its own work/<rank> (the batch script's cd): the sandbox binds
        # them all, and keeps that directory.
        wrap = self.sandbox_for(cfg, work, environment, chdir=False, identity=identity)
        return self._submit_job(
            work,
            wrap(_launcher.with_startup_hook(_launcher.command(python))),
            name=spec.allocation_id,
            nodes=len(spec.containers),
            per_node=len(spec.containers[0]),
            cfg=cfg,
        )

    def _submit_job(
        self,
        work: Path,
        argv: list[str],
        *,
        name: str,
        nodes: int,
        per_node: int,
        cfg: dict[str, Any],
    ) -> str:
        """``sbatch`` a job of ``nodes`` tasks (one per node, each with ``per_node`` slots)
        that run ``argv`` in ``work/<rank>`` with the environment in ``work/env.<rank>``;
        returns its job id. ``cfg``: the experiment's or task's config (its pool, ``slurm``
        section)."""
        quoted = " ".join(shlex.quote(a) for a in argv)
        (work / "task.sh").write_text(_WRAPPER.format(work=work, argv=quoted))
        (work / "batch.sh").write_text(_BATCH.format(work=work, ntasks=nodes))
        args = [
            "sbatch",
            "--parsable",
            f"--job-name={JOB_PREFIX}{name}",
            f"--output={work / 'slurm.out'}",
            f"--chdir={work}",
            f"--nodes={nodes}",
            f"--ntasks={nodes}",
            "--ntasks-per-node=1",
        ]
        slurm = cfg.get("slurm") or {}
        if self.gpu and per_node and self._slurm_config.gres_supported:
            gpu_type = slurm.get("gpu_type")
            args.append(f"--gres=gpu:{gpu_type + ':' if gpu_type else ''}{per_node}")
        elif self.gpu and per_node:
            args.append(f"--gpus-per-node={per_node}")
        else:
            args.append(f"--cpus-per-task={max(per_node, 1)}")
        pool = self.partition(cfg)
        if pool:
            override = self._slurm_config.partition_overrides.get(pool) or {}
            args.append(f"--partition={pool}")
            args.extend(str(a) for a in override.get("sbatch_args") or [])
        args.extend(str(a) for a in self._slurm_config.sbatch_args)
        args.extend(str(a) for a in slurm.get("sbatch_args") or [])
        if self._blocked:
            args.append(f"--exclude={','.join(sorted(self._blocked))}")
        args.append(str(work / "batch.sh"))
        out = _slurm(args)
        if out.returncode != 0:
            raise _launcher.LaunchError(f"sbatch refused the job: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    # ------------------------------------------------------------ non-trial tasks

    def _schedule_tasks(self) -> None:
        """Submit every queued command and generic task as a Slurm job at once (Slurm queues
        them); TensorBoards start here, as on the local resource manager."""
        with self._store.read() as conn:
            queued = [t for t in _task_rows.queued(conn) if str(t["id"]) not in self._task_runs]
        if queued:
            self._blocked = self.node_blocks()[0]
        for task in queued:
            if self._stopping.is_set():
                return
            if task["type"] in self.SLURM_TASKS:
                self._submit_task(task)
            else:
                self._launch_task(task, [])

    def _submit_task(self, task: dict[str, Any]) -> None:
        task_id = str(task["id"])
        allocation_id = _task_rows.allocation_of(task)
        sink = LogSink(self._logs, task_id, allocation_id)
        work = self._work_root / allocation_id
        slots = int(task["slots"])
        try:
            with self._store.read() as conn:
                self.check_owner(conn, int(task["owner_id"]))
                workspace = (task.get("data") or {}).get("workspaceId")
                identity = self.identity_of(conn, int(task["owner_id"]), workspace)
            work.mkdir(parents=True, exist_ok=True)
            launch = self._prepare_task(task, work / "0", list(range(slots)))
            launch.env.update(DET_RESOURCES_TYPE="slurm-job", DET_AGENT_ID="slurm")
            if self.gpu:
                launch.env.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm's gres sets it
            _write_env(work / "env.0", launch.env)
            cfg = dict(task["config"] or {})
            environment = _envs.task_env_dir(self._env_root, task_id)
            wrap = self.sandbox_for(cfg, work, environment, chdir=False, identity=identity)
            argv = wrap(_launcher.with_startup_hook(launch.argv))
            job_id = self._submit_job(
                work, argv, name=allocation_id, nodes=1, per_node=slots, cfg=cfg
            )
        except Exception as e:
            self._task_not_started(task, sink, work, e)
            return
        job = SlurmJob(job_id, work, sink)
        job.per_node = slots
        self._task_jobs[task_id] = job
        self._task_runs[task_id] = _job_run(job, sink, _local.STOP_GRACE_S, allocation_id)
        sink.master(f"Resources for {task['description']} were submitted as Slurm job {job_id}")

    def _record_task_running(self, task_id: str) -> None:
        """Slurm started the task's job: the task is RUNNING (QUEUED until then)."""
        allocation_id = self._task_runs[task_id].allocation_id
        self._store.write(lambda conn: _task_rows.set_running(conn, task_id, allocation_id, {}))

    def _adopt_task_jobs(self, known: dict[str, tuple[str, str, str]]) -> None:
        """Jobs of commands and tasks that outlived the previous master are adopted; a live
        task whose job ended meanwhile is ended with its exit code (never submitted twice)."""
        with self._store.read() as conn:
            live = [t for t in _task_rows.live(conn) if t["type"] in self.SLURM_TASKS]
        for task in live:
            task_id = str(task["id"])
            allocation_id = _task_rows.allocation_of(task)
            name = JOB_PREFIX + allocation_id
            work = self._work_root / allocation_id
            sink = LogSink(self._logs, task_id, allocation_id)
            if name in known and known[name][1] in _ACTIVE:
                job = SlurmJob(known[name][0], work, sink)
                job._offset = job.output.stat().st_size if job.output.exists() else 0
                job.recorded = "RUNNING" if task["state"] == "RUNNING" else ""
                self._task_jobs[task_id] = job
                self._task_runs[task_id] = _job_run(job, sink, _local.STOP_GRACE_S, allocation_id)
                sink.master(f"the restarted master adopted Slurm job {job.job_id}")
                continue
            submitted = name in known or (work / "exit_code").exists()
            if task["state"] == "QUEUED" and not submitted:
                continue  # never submitted: it is, on the first tick
            code = (
                finished_exit_code(known[name][0], work / "exit_code")
                if name in known
                else _exit_file_code(work)
            )
            status = f"exited with code {code}" if code >= 0 else "the master restarted"
            sink.master(f"task {task_id} {status} while the master was down")
            with self._store.tx() as conn:
                _task_rows.end_run(conn, task_id, status)
                _users.revoke_allocation_tokens(conn, allocation_id)
        self._logs.flush()


def _job_run(
    job: SlurmJob, sink: LogSink, timeout: float, allocation_id: str = "", port_offset: int = 0
) -> _local._Run:
    """The local manager's run record, with the Slurm job standing for its process group
    (holding no slots of the manager's: Slurm accounts for them)."""
    return _local._Run(
        [job],  # type: ignore[list-item]
        sink,
        [],
        timeout,
        port_offset=port_offset,
        allocation_id=allocation_id,
    )


def _write_env(path: Path, env: dict[str, str]) -> None:
    """The variables of ``env`` the batch script's own environment lacks (Slurm starts a job
    with the submitter's environment), as a file ``set -a; .`` reads."""
    lines = [
        f"{k}={shlex.quote(v)}"
        for k, v in env.items()
        if os.environ.get(k) != v and k.isidentifier()
    ]
    path.write_text("\n".join(lines) + "\n")


def _exit_file_code(work: Path) -> int:
    try:
        return int((work / "exit_code").read_text().strip())
    except (OSError, ValueError):
        return -1
