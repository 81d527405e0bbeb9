"""Slurm's side of the Slurm backend: its commands (``squeue``, ``sinfo``, ``scontrol``), the
master config's ``resource_manager: {type: slurm}`` section, one allocation as a job
(:class:`SlurmJob`) and the scripts a job runs.

A job's state comes from ``squeue`` while it is known there, then from ``scontrol show job``
(kept ~5 minutes) or the exit code the batch script wrote. The job's output file is copied into
the task's logs as it grows. Jobs are named ``det-<allocation id>``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

from determined.master.resources._launcher import LaunchError
from determined.master.resources._log_capture import LogSink

logger = logging.getLogger("determined.master")
JOB_PREFIX = "det-"
# Slurm job states after which the job runs no more.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
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


def slurm_cmd(args: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command, its output as text."""
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def job_states(tag: str = "", prefix: str = JOB_PREFIX) -> dict[str, tuple[str, str, str]]:
    """``job name -> (job id, state, where)`` of this master's jobs squeue knows: those with
    its ``tag`` as their comment (a root master submits for other users, ``submit``), and
    the untagged ones of its own user (submitted before tags). ``where`` is the node list of
    a job that has nodes, else why it waits in parentheses (``(Resources)``, ``(Priority)``:
    squeue's ``%R``)."""
    out = slurm_cmd(["squeue", "-h", "-o", "%j|%i|%T|%U|%k|%R"])
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed: {out.stderr.strip()}")
    jobs = {}
    for line in out.stdout.splitlines():
        # The reason (last) is Slurm's text; the comment is ours (no "|").
        name, job_id, state, uid, comment, nodes = (line.split("|", 5) + [""] * 6)[:6]
        if not name.startswith(prefix):
            continue
        if (tag and comment == tag) or (comment in ("", "(null)") and uid == str(os.getuid())):
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
    out = slurm_cmd(["sinfo", "-h", "-N", "-o", "%N|%c|%G"])
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
    out = slurm_cmd(["scontrol", "-o", "show", "job", job_id])
    for field in out.stdout.split():
        if field.startswith("ExitCode="):
            code, _, sig = field[len("ExitCode=") :].partition(":")
            if sig and sig != "0":
                return 128 + int(sig)
            return int(code)
    return -1


class SlurmJob:
    """One allocation as a Slurm job; a ``_manager.Process`` as a local process group is
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
        if name in known and known[name][1] in ACTIVE:
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

    def skip_written(self) -> None:
        """Copy only what the job writes from now on (an adopted job's earlier output is in
        its logs already)."""
        self._offset = self.output.stat().st_size if self.output.exists() else 0

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
            slurm_cmd(args, timeout=10)
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


def partition(config: SlurmConfig, cfg: dict[str, Any]) -> str | None:
    """An experiment's or task's resource pool is a partition (default: the master's
    ``default_compute_resource_pool``, else Slurm's default partition)."""
    pool = (cfg.get("resources") or {}).get("resource_pool") or (
        config.default_compute_resource_pool
    )
    return str(pool) if pool else None


def submit(
    config: SlurmConfig,
    work: Path,
    argv: list[str],
    *,
    name: str,
    nodes: int,
    per_node: int,
    cfg: dict[str, Any],
    exclude: set[str],
    tag: str = "",
    user: tuple[int, int] | None = None,
) -> str:
    """``sbatch`` a job of ``nodes`` tasks (one per node, each with ``per_node`` slots) that
    run ``argv`` in ``work/<rank>`` with the environment in ``work/env.<rank>``, on no node of
    ``exclude``; returns its job id. ``cfg``: the experiment's or task's config (its pool,
    ``slurm`` section); ``tag``: the job's comment (``job_states`` finds it by it); ``user``:
    (uid, gid) a root master submits it for (``sbatch --uid --gid``: Slurm runs, lists and
    accounts it as theirs), who owns ``work`` and gets its scripts. Raises LaunchError when
    sbatch refuses it."""
    quoted = " ".join(shlex.quote(a) for a in argv)
    (work / "task.sh").write_text(_WRAPPER.format(work=work, argv=quoted))
    (work / "batch.sh").write_text(_BATCH.format(work=work, ntasks=nodes))
    if user is not None:
        for script in ("task.sh", "batch.sh"):
            os.chown(work / script, *user)
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
    if config.gpu and per_node and config.gres_supported:
        gpu_type = slurm.get("gpu_type")
        args.append(f"--gres=gpu:{gpu_type + ':' if gpu_type else ''}{per_node}")
    elif config.gpu and per_node:
        args.append(f"--gpus-per-node={per_node}")
    else:
        args.append(f"--cpus-per-task={max(per_node, 1)}")
    pool = partition(config, cfg)
    if pool:
        override = config.partition_overrides.get(pool) or {}
        args.append(f"--partition={pool}")
        args.extend(str(a) for a in override.get("sbatch_args") or [])
    args.extend(str(a) for a in config.sbatch_args)
    args.extend(str(a) for a in slurm.get("sbatch_args") or [])
    if exclude:
        args.append(f"--exclude={','.join(sorted(exclude))}")
    if tag:
        args.append(f"--comment={tag}")
    if user is not None:
        args += [f"--uid={user[0]}", f"--gid={user[1]}"]
    args.append(str(work / "batch.sh"))
    out = slurm_cmd(args)
    if out.returncode != 0:
        raise LaunchError(f"sbatch refused the job: {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]


def write_env(path: Path, env: dict[str, str]) -> None:
    """The variables of ``env`` the batch script's own environment lacks (Slurm starts a job
    with the submitter's environment), as a file ``set -a; .`` reads."""
    lines = [
        f"{k}={shlex.quote(v)}"
        for k, v in env.items()
        if os.environ.get(k) != v and k.isidentifier()
    ]
    path.write_text("\n".join(lines) + "\n")


def exit_file_code(work: Path) -> int:
    try:
        return int((work / "exit_code").read_text().strip())
    except (OSError, ValueError):
        return -1
