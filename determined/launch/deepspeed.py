"""``python -m determined.launch.deepspeed (--trial module:Class | SCRIPT...)``

Starts one worker per slot of this trial with DeepSpeed's own launcher (the ``[deepspeed]``
extra), the launch layer of a ``DeepSpeedTrial``. The chain on the chief container is::

    pid_server -> deepspeed runner -> (per worker) pid_client -> wrap_rank RANK -> SCRIPT

so every output line carries its rank and one failing worker stops the others. Exports
``USE_DEEPSPEED=1`` and ``DET_CHIEF_IP``; workers get DeepSpeed's ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_SIZE``, ``CROSS_RANK``, ``CROSS_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``. Without GPUs DeepSpeed uses its CPU accelerator (gloo); ``LOCAL_SIZE`` tells it
how many slots this container has.

Several containers: as in 0.37, a hostfile of the containers' addresses is written to
``/tmp/hostfile-<allocation>.txt`` on every container, the other containers run only sshd
(port ``DTRAIN_SSH_PORT``) under a pid_server, and the chief's runner reaches them with pdsh.
That needs sshd and pdsh in the task environment.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping

import filelock

import determined as det
from determined.common.api import Session, _routes
from determined.launch import _signals

logger = logging.getLogger("determined.launch.deepspeed")

# The port of the sshd that multi-container launches reach each container on (0.37's value).
DTRAIN_SSH_PORT = 12350
# DeepSpeed's name for the file of exports its multi-node runner passes to every node.
DEEPSPEED_ENVIRONMENT_NAME = ".deepspeed_env"
SSHD_WAIT_SECONDS = 20

# Never passed on to the workers of other containers: they describe this one.
_EXCLUDED_ENV = [
    re.compile(p)
    for p in (
        "BASH_FUNC_.*",
        "OLDPWD",
        "HOSTNAME",
        ".*CUDA_VISIBLE_DEVICES",
        "SLURM_PROCID",
        "DET_SLOT_IDS",
        "DET_AGENT_ID",
    )
]


def is_using_cuda() -> bool:
    return bool(os.environ.get("CUDA_VISIBLE_DEVICES", "").strip())


def is_nccl_socket_ifname_env_var_set() -> bool:
    return bool(os.environ.get("NCCL_SOCKET_IFNAME", "").strip())


def get_hostfile_path(multi_machine: bool, allocation_id: str) -> str | None:
    """The hostfile of a multi-container trial (exported as ``DET_DEEPSPEED_HOSTFILE_PATH``);
    None for one container, where DeepSpeed needs none. The allocation id in the name keeps
    trials that share /tmp apart."""
    if not multi_machine:
        return None
    path = f"/tmp/hostfile-{allocation_id}.txt"
    os.environ["DET_DEEPSPEED_HOSTFILE_PATH"] = path
    return path


def create_hostlist_file(
    hostfile_path: str | None, host_slot_counts: list[int], ip_addresses: list[str]
) -> str:
    """Write ``<host> slots=<n>`` lines (once) and return the chief's address for DeepSpeed:
    ``localhost`` when there is one container."""
    if len(host_slot_counts) != len(ip_addresses):
        raise ValueError(
            f"{len(ip_addresses)} container addresses but {len(host_slot_counts)} slot counts"
        )
    hosts = ["localhost"] if len(ip_addresses) == 1 else list(ip_addresses)
    if hostfile_path is not None and not os.path.exists(hostfile_path):
        os.makedirs(os.path.dirname(hostfile_path), exist_ok=True)
        with open(hostfile_path, "w") as f:
            f.writelines(f"{h} slots={n}\n" for h, n in zip(hosts, host_slot_counts, strict=True))
    return hosts[0]


# Chosen once per launcher process: allocation ids repeat across masters sharing a machine,
# and a sandboxed launcher's pid is the same in every trial.
_TOKEN = secrets.token_hex(4)


def _pid_socket(allocation_id: str) -> str:
    return f"/tmp/pid_server-{allocation_id}-{_TOKEN}"


def create_pid_server_cmd(allocation_id: str, num_workers: int) -> list[str]:
    return [
        sys.executable, "-m", "determined.exec.pid_server",
        "--on-fail", "SIGTERM", "--on-exit", "WAIT", "--grace-period", "5",
        _pid_socket(allocation_id), str(num_workers), "--",
    ]  # fmt: skip


def create_pid_client_cmd(allocation_id: str) -> list[str]:
    return [sys.executable, "-m", "determined.exec.pid_client", _pid_socket(allocation_id), "--"]


def create_log_redirect_cmd() -> list[str]:
    return [sys.executable, "-m", "determined.launch.wrap_rank", "RANK", "--"]


def create_sshd_cmd() -> list[str]:
    return [
        "/usr/sbin/sshd", "-p", str(DTRAIN_SSH_PORT),
        "-f", "/run/determined/ssh/sshd_config", "-D",
    ]  # fmt: skip


@functools.cache
def _master_port() -> int:
    """The rendezvous port of DeepSpeed's workers: a free one, chosen once per launcher
    process, so trials that share a machine do not meet on DeepSpeed's default (29500)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def create_run_command(master_address: str, hostfile_path: str | None) -> list[str]:
    """DeepSpeed's runner, started with this interpreter; the worker chain follows it."""
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner"]
    if hostfile_path is not None:
        cmd += ["-H", hostfile_path]
    cmd += ["--master_addr", master_address, "--master_port", str(_master_port())]
    # The worker chain is not a Python file, it takes no --local_rank, and the containers'
    # sshd is checked here, not by DeepSpeed.
    return [*cmd, "--no_python", "--no_local_rank", "--no_ssh_check", "--"]


def filter_env_vars(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less what must not reach workers on other containers (DeepSpeed itself keeps
    only a few prefixes; 0.37 kept everything else, as this does)."""
    return {k: v for k, v in env.items() if not any(p.match(k) for p in _EXCLUDED_ENV)}


def create_deepspeed_env_file() -> None:
    """Write this environment, shell-quoted, where DeepSpeed's multi-node runner reads it
    (values with line breaks are left out: the runner reads one variable per line)."""
    with open(DEEPSPEED_ENVIRONMENT_NAME, "w") as f:
        for k, v in filter_env_vars(os.environ).items():
            line = f"{k}={shlex.quote(v)}"
            if "\n" in line or "\r" in line:
                logger.warning(f"not passing {k} to the workers: its value has a line break")
                continue
            f.write(line + "\n")


def check_deepspeed_version(multi_machine: bool) -> None:
    """DeepSpeed 0.6.1 to 0.6.4 cannot skip their own ssh check, which fails here."""
    if not multi_machine:
        return
    import deepspeed
    from packaging import version

    v = version.parse(deepspeed.__version__)
    if version.parse("0.6.0") < v <= version.parse("0.6.4"):
        raise ValueError(
            f"DeepSpeed {deepspeed.__version__} cannot launch on several containers here (its "
            "ssh check cannot be skipped before 0.6.5): install deepspeed>=0.6.5"
        )


def _check_sshd(addr: str, deadline: float, port: int) -> None:
    """Wait until ``addr:port`` greets like an sshd; ValueError at ``deadline``."""
    while True:
        try:
            with socket.create_connection((addr, port), timeout=2) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.time() > deadline:
            raise ValueError(f"no sshd greeting from {addr}:{port}")
        time.sleep(0.1)


def _task_session(info: det.ClusterInfo) -> Session:
    return Session(info.master_url, info.session_token, cert=info.master_cert_file)


def _run(cmd: list[str]) -> int:
    proc = subprocess.Popen(cmd)
    _signals.forward_to(proc)
    return _signals.exit_code(int(proc.wait()))


def _prepare(info: det.ClusterInfo, multi_machine: bool) -> tuple[str | None, str]:
    """Set the environment every container needs and write the hostfile; returns the hostfile
    and the chief's address for DeepSpeed."""
    os.environ["DET_CHIEF_IP"] = info.container_addrs[0]
    if is_using_cuda() and not is_nccl_socket_ifname_env_var_set():
        iface = os.environ.get("DET_INTER_NODE_NETWORK_INTERFACE")
        if iface:
            os.environ["NCCL_SOCKET_IFNAME"] = iface
    elif not is_using_cuda():
        # DeepSpeed's CPU accelerator counts this many devices on the container.
        os.environ["LOCAL_SIZE"] = str(len(info.slot_ids))
    hostfile_path = get_hostfile_path(multi_machine, info.allocation_id)
    if hostfile_path is None:
        return None, create_hostlist_file(None, info.container_slot_counts, info.container_addrs)
    # The containers may share /tmp: one of them writes the file.
    with filelock.FileLock(f"{hostfile_path}.lock"):
        address = create_hostlist_file(
            hostfile_path, info.container_slot_counts, info.container_addrs
        )
    return hostfile_path, address


def main(script: list[str]) -> int:
    info = det.get_cluster_info()
    if info is None or info.task_type != "TRIAL":
        print("determined.launch.deepspeed runs trials started by a master", file=sys.stderr)
        return 1
    multi_machine = len(info.container_addrs) > 1
    check_deepspeed_version(multi_machine)
    resources_id = os.environ.get("DET_RESOURCES_ID")
    if resources_id is None:
        raise RuntimeError("DET_RESOURCES_ID is not set: this launcher runs under a master")
    hostfile_path, master_address = _prepare(info, multi_machine)
    sshd_cmd = create_sshd_cmd()
    pid_server_cmd = create_pid_server_cmd(info.allocation_id, len(info.slot_ids))
    if info.container_rank > 0:
        # Other containers only serve ssh to the chief's runner; the master may end them
        # once the chief's launcher has exited.
        _routes.mark_resources_daemon(_task_session(info), info.allocation_id, resources_id)
        return _run(pid_server_cmd + sshd_cmd)

    os.environ["USE_DEEPSPEED"] = "1"
    full_cmd = (
        pid_server_cmd
        + create_run_command(master_address, hostfile_path)
        + create_pid_client_cmd(info.allocation_id)
        + create_log_redirect_cmd()
        + script
    )
    if not multi_machine:
        return _run(full_cmd)
    create_deepspeed_env_file()
    os.environ["PDSH_SSH_ARGS"] = (
        f"-o PasswordAuthentication=no -o StrictHostKeyChecking=no -p {DTRAIN_SSH_PORT} -2 -a -x %h"
    )
    sshd = subprocess.Popen(sshd_cmd)
    try:
        deadline = time.time() + SSHD_WAIT_SECONDS
        for addr in info.container_addrs:
            _check_sshd(addr, deadline, DTRAIN_SSH_PORT)
        return _run(full_cmd)
    finally:
        sshd.kill()
        sshd.wait()


def parse_args(args: list[str]) -> list[str]:
    """The command to run per worker: ``--trial module:Class`` (through
    ``determined.exec.harness``) or a script; exits 1 with a usage message otherwise."""
    parser = argparse.ArgumentParser(
        usage="%(prog)s (--trial TRIAL)|(SCRIPT...)",
        description="Launch a trial or script under DeepSpeed's launcher on a Determined trial.",
    )
    parser.add_argument("--trial", help="module:Class of a trial (then give no SCRIPT)")
    parser.add_argument("script", metavar="SCRIPT...", nargs=argparse.REMAINDER)
    parsed = parser.parse_args(args)
    script = parsed.script or []
    if parsed.trial is not None:
        if script:
            parser.print_usage()
            print("error: extra arguments to --trial:", script, file=sys.stderr)
            sys.exit(1)
        return det.util.legacy_trial_entrypoint_to_script(parsed.trial)
    if not script:
        parser.print_usage()
        print("error: empty script is not allowed", file=sys.stderr)
        sys.exit(1)
    return script


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    sys.exit(main(parse_args(sys.argv[1:])))
