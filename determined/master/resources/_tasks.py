"""What process each kind of non-trial task runs (the one place that decides it), and its
environment: 0.37's commands, generic tasks, TensorBoards, notebooks (JupyterLab) and shells
(a per-task OpenSSH server), as local process groups (docs/tasks.md).

:func:`prepare` unpacks the task's context directory into its work dir and returns the argv,
the process environment and the ports it serves (``{"web": "unix:<socket>"}`` for a
notebook or a TensorBoard, ``{"ssh": port}`` for a shell). A web service listens on a unix
socket in a directory only the master's user (or the task's own OS user) opens, a shell's sshd
on 127.0.0.1 with the owner's key only; users reach them through the master's proxy
(``/proxy/<task id>/``), which checks their login first.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from determined.common import expconf
from determined.master.resources import _envs
from determined.master.resources._launcher import LaunchError, link_bind_mounts, process_env

SSHD_PATHS = ("/usr/sbin/sshd", "/usr/bin/sshd")


@dataclasses.dataclass
class TaskLaunch:
    argv: list[str]
    env: dict[str, str]
    ports: dict[str, int | str]  # a TCP port, or UNIX_PREFIX + a unix socket's path


# A service served on a unix socket (a notebook's, a TensorBoard's) has "unix:<path>" for its port.
UNIX_PREFIX = "unix:"


def socket_path(task_id: str) -> Path:
    """Where a task's service listens: a socket in a fresh directory of the master's user's
    (0700) under the system's temporary directory (a socket's path must stay short)."""
    parent = Path(tempfile.mkdtemp(prefix=f"det-{task_id[:8]}-"))
    parent.chmod(0o700)
    return parent / "web.sock"


def socket_dirs(ports: dict[str, Any] | None) -> list[Path]:
    """The directories of the unix sockets among a task's ``ports`` (removed when it ends;
    bound into its sandbox)."""
    return [
        Path(str(v)[len(UNIX_PREFIX) :]).parent
        for v in (ports or {}).values()
        if str(v).startswith(UNIX_PREFIX)
    ]


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proxy_path(task_id: str) -> str:
    """The path prefix under which the master proxies the task's web port (0.37's scheme)."""
    return f"/proxy/{task_id}/"


def _unpack(context: bytes | None, work_dir: Path) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    if not context:
        return
    try:
        with tarfile.open(fileobj=io.BytesIO(context), mode="r:gz") as tar:
            tar.extractall(work_dir, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise LaunchError(f"cannot unpack the context directory: {e}") from e


def check_environment(config: dict[str, Any]) -> None:
    """Refuse ``environment.environment_variables`` that no process could be started with,
    when the task is created rather than when it starts: NUL bytes (exec cannot pass them)
    and empty names (``=value``).

    Raises:
        LaunchError: saying which entry is wrong and why.
    """
    environment = config.get("environment") or {}
    raw = environment.get("environment_variables") if isinstance(environment, dict) else None
    groups = raw.items() if isinstance(raw, dict) else [("", raw or [])]
    for group, items in groups:
        where = f"environment.environment_variables{'.' + str(group) if group else ''}"
        if not isinstance(items, list):
            raise LaunchError(f"{where} must be a list of NAME=value strings, not {items!r}")
        for item in items:
            text = str(item)
            if "\0" in text:
                raise LaunchError(
                    f"{where}: {text!r} contains a NUL byte, which no process environment can "
                    "hold; remove it"
                )
            if not text.partition("=")[0]:
                raise LaunchError(f"{where}: {text!r} has no name; write NAME=value")


# Set once JupyterLab was found importable: it stays so while the master runs.
_jupyterlab_found = False


def notebook_refusal() -> str | None:
    """Why no notebook can start here, or None: JupyterLab (the ``[notebook]`` extra) must be
    importable by the master's interpreter, whose packages every task's environment sees.
    Asked of a child interpreter with the master's environment, as a notebook would be."""
    global _jupyterlab_found
    if _jupyterlab_found:
        return None
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import jupyterlab"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot check for JupyterLab with {sys.executable}: {e}"
    if probe.returncode == 0:
        _jupyterlab_found = True
        return None
    lines = probe.stderr.strip().splitlines()
    why = lines[-1] if lines else f"exit status {probe.returncode}"
    return (
        f"notebooks need JupyterLab, which the master's Python cannot import ({why}). Install "
        f"the notebook extra into it: `{install_notebook_command()}`, then start the notebook "
        "again (the running master sees it at once)"
    )


def install_notebook_command() -> str:
    """The command that installs the ``[notebook]`` extra into the master's Python: from the
    clone this master runs from (an editable install), else from the package index."""
    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").is_file() and (root / "determined" / "master").is_dir():
        return f"{sys.executable} -m pip install -e '{root}[notebook]'"
    return f"{sys.executable} -m pip install 'redetermined[notebook]'"


def _user_env(config: dict[str, Any], gpu: bool) -> dict[str, str]:
    """A task's ``environment_variables`` for its device kind (its config is not an experiment's:
    checked by :func:`check_environment`, not parsed into expconf's model)."""
    raw = (config.get("environment") or {}).get("environment_variables") or []
    if isinstance(raw, dict):
        raw = raw.get("cuda" if gpu else "cpu") or []
    return expconf.environment_dict(raw)


def entrypoint_argv(entrypoint: Any) -> list[str]:
    """A command's entrypoint: a list is the argv, a string runs in ``sh -c`` (0.37 too)."""
    if isinstance(entrypoint, list) and len(entrypoint) == 1:
        entrypoint = entrypoint[0]  # `det cmd run "echo a; echo b"`: one shell command line
    if isinstance(entrypoint, list) and entrypoint:
        return [str(a) for a in entrypoint]
    if isinstance(entrypoint, str) and entrypoint.strip():
        return ["sh", "-c", entrypoint]
    raise LaunchError(f"the task's entrypoint is empty or not a string or list: {entrypoint!r}")


def _sshd() -> str:
    for path in SSHD_PATHS:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("sshd")
    if found:
        return found
    raise LaunchError("no sshd here: install Debian's openssh-server for det shell")


def _shell(task: dict[str, Any], work_dir: Path, port: int, env: dict[str, str]) -> list[str]:
    """sshd on 127.0.0.1:``port`` with a host key of its own, accepting only the task's key;
    every session (a login shell or the command ssh passed) starts in the work dir with the
    task's environment (sshd gives sessions a fresh one: a forced command restores it)."""
    if os.geteuid() == 0:
        # sshd started by root insists on its privilege separation directory.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    ssh_dir = work_dir / ".det-ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    host_key = ssh_dir / "host_key"
    if not host_key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
            check=True,
            capture_output=True,
        )
    keys = ssh_dir / "authorized_keys"
    keys.write_text(str((task.get("data") or {}).get("publicKey") or "") + "\n")
    keys.chmod(0o600)
    env_file = ssh_dir / "env.sh"
    env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    session = ssh_dir / "session.sh"
    session.write_text(
        "#!/bin/sh\n"
        f". {shlex.quote(str(env_file))}\n"
        f"cd {shlex.quote(str(work_dir))}\n"
        'if [ -n "$SSH_ORIGINAL_COMMAND" ]; then exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"; fi\n'
        'exec "${SHELL:-/bin/sh}" -l\n'
    )
    session.chmod(0o700)
    config = ssh_dir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {keys}",
                "PidFile none",
                "UsePAM no",
                "StrictModes no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "AllowTcpForwarding yes",
                "PrintMotd no",
                f"ForceCommand {session}",
                "",
            ]
        )
    )
    return [_sshd(), "-D", "-e", "-f", str(config)]


def prepare(
    task: dict[str, Any],
    work_dir: Path,
    *,
    environment: Path,
    master_url: str,
    cluster_id: str,
    allocation_id: str,
    token: str,
    owner: str,
    slot_ids: list[int],
    gpu: bool,
) -> TaskLaunch:
    """The process of ``task`` (a row of ``store._tasks``, with its context), its work dir made;
    it runs in ``environment`` (a venv of ``_envs``).

    Raises:
        LaunchError: a bad context archive, an empty entrypoint, a missing program.
    """
    _unpack(task.get("context"), work_dir)
    config = dict(task["config"] or {})
    link_bind_mounts(
        [
            (str(m["host_path"]), str(m["container_path"]))
            for m in config.get("bind_mounts") or []
            if isinstance(m, dict) and m.get("host_path") and m.get("container_path")
        ],
        work_dir,
    )
    kind = str(task["type"])
    ids = {
        "DET_MASTER": master_url,
        "DET_CLUSTER_ID": cluster_id,
        "DET_TASK_ID": str(task["id"]),
        "DET_ALLOCATION_ID": allocation_id,
        "DET_CONTAINER_ID": allocation_id,
        "DET_TASK_TYPE": kind,
    }
    user_env = _user_env(config, gpu)
    env = process_env(user_env, work_dir, gpu=gpu, slot_ids=slot_ids, ids=ids, token=token)
    # As 0.37's: `det` in the task is its owner, with the owner's token for this allocation
    # (revoked when it ends); common.api._auth reads them.
    env.update(DET_USER=owner, DET_USER_TOKEN=token)
    _envs.activate(env, environment)
    python = str(_envs.python_of(environment))
    ports: dict[str, int | str] = {}
    data = dict(task.get("data") or {})
    if kind == "COMMAND" and config.get("entrypoint") in (None, "", []):
        argv = ["true"]  # 0.37 accepts a command with no entrypoint: it exits 0 at once
    elif kind in ("COMMAND", "GENERIC"):
        argv = entrypoint_argv(config.get("entrypoint"))
    elif kind == "TENSORBOARD":
        # On a unix socket, as a notebook (below): only the master's proxy reaches it.
        sock = socket_path(str(task["id"]))
        ports["web"] = UNIX_PREFIX + str(sock)
        spec = ",".join(f"{name}:{path}" for name, path in sorted(data.get("logdirs", {}).items()))
        argv = [python, "-m", "determined.exec._tensorboard", str(sock), "--logdir_spec", spec]
        argv += ["--path_prefix", proxy_path(str(task["id"])).rstrip("/")]
        argv += ["--reload_interval", "1"]
    elif kind == "NOTEBOOK":
        # A unix socket in a directory only the master's user opens, not a TCP port anyone on
        # the host reaches: only the master's proxy (which checks the owner) talks to it.
        sock = socket_path(str(task["id"]))
        ports["web"] = UNIX_PREFIX + str(sock)
        argv = [python, "-m", "jupyterlab", "--no-browser", "--allow-root"]
        argv += [
            f"--ServerApp.sock={sock}",
            "--ServerApp.sock_mode=0600",
            f"--ServerApp.base_url={proxy_path(str(task['id']))}",
            f"--ServerApp.root_dir={work_dir}",
            # The master's proxy authenticates every request and is the only client of the
            # socket; JupyterLab's own token would be a second login.
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--ServerApp.allow_remote_access=True",
        ]
        idle = idle_seconds(config.get("idle_timeout"))
        if idle:
            argv += [
                f"--ServerApp.shutdown_no_activity_timeout={idle}",
                f"--MappingKernelManager.cull_idle_timeout={idle}",
                "--MappingKernelManager.cull_interval=10",
            ]
    elif kind == "SHELL":
        ssh_port = ports["ssh"] = free_port()
        argv = _shell(task, work_dir, ssh_port, env)
    else:
        raise LaunchError(f"unknown task type {kind!r}")
    return TaskLaunch(argv, env, ports)


def idle_seconds(value: Any) -> int:
    """0.37's ``idle_timeout`` ("30m", "1h", seconds); 0 for none."""
    if value in (None, "", 0):
        return 0
    if isinstance(value, int | float):
        return int(value)
    text = str(value).strip()
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(float(text))
    except (ValueError, IndexError) as e:
        raise LaunchError(f"idle_timeout {value!r} is not a duration like 30m") from e
