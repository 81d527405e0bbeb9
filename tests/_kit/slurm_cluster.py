"""A private two-node Slurm (``n1``, ``n2``, 2 CPUs each, several ``slurmd -N`` on this host)
with its own munged, all state under one directory, for the Slurm resource manager's tests.

:func:`start` needs the ``slurm-wlm`` and ``munge`` binaries (``scripts/setup.sh --tests``
installs them); callers skip when :func:`missing` names any.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import time

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def missing() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def _free_port_block(n: int) -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n >= 65535:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free block of ports for slurmctld and slurmd")


class SlurmCluster:
    """``start()``: munged, slurmctld and ``slurmd -N n1`` / ``-N n2``; ``env`` holds
    ``SLURM_CONF`` for clients; ``stop()`` cancels every job and reaps the daemons."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.root / "log" / log, "wb") as out:
            p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.procs.append(p)
        return p

    def start(self) -> None:
        d = self.root
        d.mkdir(parents=True, exist_ok=True)
        for sub in ("munge", "ctld", "d/n1", "d/n2", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses a socket directory (or a parent) that is not 755.
        for path in (d, d / "munge"):
            path.chmod(0o755)
        p = d
        while p != p.parent and p.parent != pathlib.Path("/"):
            p = p.parent
            if p.stat().st_uid == os.getuid():
                p.chmod(p.stat().st_mode | 0o755)
        key = d / "munge" / "munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
        sock = d / "munge" / "munge.sock"
        self._spawn(
            [
                "munged",
                "-F",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={d / 'munge' / 'munged.pid'}",
                f"--log-file={d / 'munge' / 'munged.log'}",
                f"--seed-file={d / 'munge' / 'munged.seed'}",
            ],
            "munged.out",
        )
        self._wait(lambda: sock.exists(), 5, "munged socket")
        user = pwd.getpwuid(os.getuid()).pw_name
        base = _free_port_block(3)
        (d / "slurm.conf").write_text(
            f"""ClusterName=fixture
SlurmctldHost=localhost
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmctldPort={base}
StateSaveLocation={d}/ctld
SlurmdSpoolDir={d}/d/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/log/jobcomp.log
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=3
SchedulerParameters=sched_interval=1
NodeName=n[1-2] NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 \
Port={base + 1}-{base + 2} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
"""
        )
        self._spawn(["slurmctld", "-D"], "slurmctld.out")
        self._spawn(["slurmd", "-D", "-N", "n1"], "slurmd-n1.out")
        self._spawn(["slurmd", "-D", "-N", "n2"], "slurmd-n2.out")

        def idle() -> bool:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self.env
            )
            return out.stdout.strip() == "idle"

        self._wait(idle, 20, "both nodes idle")

    def _wait(self, ok: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ok():  # type: ignore[operator]
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text()[-2000:]}" for p in (self.root / "log").iterdir()
                )
                raise RuntimeError(f"Slurm fixture: no {what} after {timeout}s\n{logs}")
            time.sleep(0.1)

    def run(self, *args: str) -> str:
        return subprocess.run(
            list(args), capture_output=True, text=True, env=self.env, check=True
        ).stdout

    def stop(self) -> None:
        # Every job, whoever it runs for (a root master submits for its tasks' OS users).
        jobs = subprocess.run(
            ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=self.env
        ).stdout.split()
        if jobs:
            subprocess.run(["scancel", *jobs], env=self.env, capture_output=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=self.env)
            if not out.stdout.strip():
                break
            time.sleep(0.1)
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
