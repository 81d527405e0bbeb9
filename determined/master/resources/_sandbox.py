"""The task sandbox: every trial and task process starts inside bubblewrap (``bwrap``: Linux
mount, PID and IPC namespaces, all capabilities dropped), on the local and the Slurm resource
managers alike (docs/security.md).

Inside, the process sees the system read-only, its own work dir (read-write), its Python
environment (read-only), the checkpoint storage and bind mount paths of its own config, and a
private ``/tmp``, ``/var/tmp`` and ``/dev/shm``. The master's data dir (database, logs, other
tasks' work dirs, shell keys, other environments) is an empty, throwaway directory there, and
``/proc`` shows the task's own processes only (no other process's environment or root).

``task_isolation`` (master config, ``--task-isolation``) chooses:

- ``auto`` (default): bubblewrap when it works here, else none; without it the master says so
  at start-up and runs only the tasks of admins and of the default user ``determined`` (a
  single-user master), refusing other users' with a message naming the fix;
- ``bubblewrap``: required; the master refuses to start without it;
- ``none``: no sandbox, every user's tasks run (the operator's explicit choice).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from determined.master.resources import _identity

SETTINGS = ("auto", "bubblewrap", "none")
# The seeded single-user account (0.37's default CLI user): with admins, the only users whose
# tasks an unsandboxed master in ``auto`` runs.
DEFAULT_USER = "determined"
# What sshd needs as root inside the sandbox: its privilege separation (a chroot, then the
# logged-in user's ids). Only shells keep them (docs/security.md).
SSHD_CAPS = ("CAP_SYS_CHROOT", "CAP_SETUID", "CAP_SETGID")


class SandboxError(Exception):
    """``task_isolation: bubblewrap`` where bubblewrap cannot run, or a bad setting."""


def _probe(bwrap: str) -> str | None:
    """Why ``bwrap`` cannot sandbox a process here (no user namespaces, seccomp, ...), or
    None when it can: one real sandboxed run of ``true``."""
    try:
        done = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
            + ["--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL", "true"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"{bwrap} cannot run: {e}"
    if done.returncode != 0:
        return f"{bwrap} fails here: {done.stderr.strip() or f'exit code {done.returncode}'}"
    return None


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """The isolation in force for this master's tasks."""

    setting: str  # as configured: auto, bubblewrap or none
    bwrap: str | None  # the bubblewrap binary in use; None: tasks run unsandboxed
    reason: str = ""  # why there is no sandbox (auto without a working bubblewrap)
    data_dir: Path | None = None  # hidden from every task

    @property
    def active(self) -> bool:
        return self.bwrap is not None

    def describe(self) -> dict[str, Any]:
        """What ``det master info`` and the web UI's cluster page show."""
        if self.active:
            detail = (
                "bubblewrap: each task sees the system read-only, its own work dir, its "
                "environment, its config's storage paths and its own /tmp; never the "
                "master's data dir"
            )
        elif self.setting == "none":
            detail = "none (task_isolation: none): every task can read the master's data dir"
        else:
            detail = (
                f"none ({self.reason}): only the tasks of admins and of the user "
                f"{DEFAULT_USER!r} run; install bubblewrap to run other users' tasks"
            )
        return {"mode": "bubblewrap" if self.active else "none", "setting": self.setting,
                "detail": detail}  # fmt: skip

    def refusal(self, username: str, admin: bool) -> str | None:
        """Why a task of ``username`` may not run unsandboxed here, or None when it may."""
        if self.active or self.setting == "none" or admin or username == DEFAULT_USER:
            return None
        return (
            f"this master runs tasks without a sandbox ({self.reason}), so it runs only the "
            f"tasks of admins and of {DEFAULT_USER!r}, not {username!r}'s: any task could read "
            "the master's database and other users' files. Install bubblewrap on the master's "
            "machine (Debian/Ubuntu: apt-get install bubblewrap) and restart it, or set "
            "task_isolation: none in the master config to run every user's tasks unsandboxed"
        )

    def wrap(
        self,
        argv: Sequence[str],
        *,
        writable: Iterable[str | Path] = (),
        read_only: Iterable[str | Path] = (),
        caps: Sequence[str] = (),
        chdir: str | Path | None = None,
        identity: _identity.Identity | None = None,
        accounts: tuple[Path, Path] | None = None,
        per_rank: bool = False,
    ) -> list[str]:
        """``argv`` run inside the sandbox (itself when there is none). ``writable``: the
        task's work dir, storage paths and read-write bind mounts; ``read_only``: its
        environment and read-only mounts; ``caps``: capabilities it keeps (a root sshd's);
        ``identity``: the OS user it runs as (``_identity``), ``accounts`` the ``passwd`` and
        ``group`` files that name it inside; ``per_rank``: ``chdir`` holds one directory per
        Slurm task rank (``$SLURM_PROCID``), entered by the identity."""
        if identity is not None:
            argv = _identity.drop_to(identity, argv, chdir, per_rank)
            caps = [*caps, *_identity.SETPRIV_CAPS]
            chdir = None  # entered as the identity
        if self.bwrap is None:
            return list(argv)
        out = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        hidden = ["/tmp", "/var/tmp", "/dev/shm"]
        if self.data_dir is not None:
            hidden.append(str(self.data_dir))
        home = os.path.expanduser("~")
        if home not in ("", "/"):
            # The master's user's home (its cloud credentials, ssh keys, det logins): an empty
            # writable one; the master's Python and code stay where they are, read-only.
            hidden.append(home)
            read_only = [*_python_paths(), *read_only]
        for path in hidden:
            out += ["--tmpfs", path]
        read_only, writable = list(read_only), list(writable)
        # The directories leading to a bound path inside an emptied one: 0755, so that a task
        # running as its own OS user (``_identity``) can reach its work dir.
        for parent in _parents_within([*read_only, *writable], hidden):
            out += ["--perms", "0755", "--dir", parent]
        for path in dict.fromkeys(str(p) for p in read_only):
            out += ["--ro-bind-try", path, path]
        for path in dict.fromkeys(str(p) for p in writable):
            out += ["--bind-try", path, path]
        if accounts is not None:
            out += ["--ro-bind", str(accounts[0]), "/etc/passwd"]
            out += ["--ro-bind", str(accounts[1]), "/etc/group"]
        out += ["--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL"]
        if os.geteuid() == 0:
            for cap in caps:
                out += ["--cap-add", cap]
        if chdir is not None:
            out += ["--chdir", str(chdir)]
        return [*out, "--", *argv]


def _parents_within(paths: Iterable[str | Path], roots: Iterable[str]) -> list[str]:
    """The ancestors of ``paths`` strictly inside one of ``roots``, parents first."""
    found: set[Path] = set()
    root_paths = [Path(r) for r in roots]
    for path in paths:
        for parent in Path(path).parents:
            if any(parent != r and parent.is_relative_to(r) for r in root_paths):
                found.add(parent)
    return [str(p) for p in sorted(found, key=lambda p: (len(p.parts), str(p)))]


def _python_paths() -> list[str]:
    """What a task needs of the master's own Python: its interpreter's prefixes, the
    ``determined`` package's source tree and the PYTHONPATH entries (read-only)."""
    import determined

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix]
    paths.append(str(Path(determined.__file__).resolve().parent.parent))
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in dict.fromkeys(paths) if p not in ("", "/")]


def configure_sandbox(setting: str, data_dir: Path | None) -> Sandbox:
    """The sandbox for ``task_isolation: setting``.

    Raises:
        SandboxError: an unknown setting, or ``bubblewrap`` where it cannot run.
    """
    if setting not in SETTINGS:
        raise SandboxError(f"task_isolation must be one of {', '.join(SETTINGS)}, not {setting!r}")
    if setting == "none":
        return Sandbox(setting, None, "task_isolation: none", data_dir)
    bwrap = shutil.which("bwrap")
    reason = "bubblewrap (bwrap) is not installed" if bwrap is None else _probe(bwrap)
    if reason is None:
        return Sandbox(setting, bwrap, "", data_dir)
    if setting == "bubblewrap":
        raise SandboxError(
            f"task_isolation: bubblewrap, but {reason}. Install bubblewrap (Debian/Ubuntu: "
            "apt-get install bubblewrap) and allow user namespaces, or choose "
            "task_isolation: auto or none"
        )
    return Sandbox(setting, None, reason, data_dir)


def storage_paths(config: Any) -> tuple[list[str], list[str]]:
    """(writable, read-only) host paths a task of ``config`` may use: its checkpoint storage
    directory (``shared_fs``: ``host_path`` joined with ``storage_path``; ``directory``:
    ``container_path``) and its ``bind_mounts`` (``read_only`` ones read-only)."""
    if not isinstance(config, dict):  # a typed experiment config
        config = config.to_json_dict()
    writable: list[str] = []
    read_only: list[str] = []
    storage = config.get("checkpoint_storage")
    if isinstance(storage, dict):
        kind = storage.get("type")
        if kind == "shared_fs" and storage.get("host_path"):
            base = Path(str(storage["host_path"]))
            sub = storage.get("storage_path")
            writable.append(str(base / str(sub)) if sub else str(base))
        elif kind == "directory" and storage.get("container_path"):
            writable.append(str(storage["container_path"]))
    for mount in config.get("bind_mounts") or []:
        if isinstance(mount, dict) and mount.get("host_path"):
            target = read_only if mount.get("read_only") else writable
            target.append(str(mount["host_path"]))
    for path in writable:
        try:
            Path(path).mkdir(parents=True, exist_ok=True)  # a bind needs it to exist
        except OSError:
            pass  # bound if it comes to exist; the task reports the error itself
    return writable, read_only
