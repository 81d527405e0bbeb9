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

import atexit
import dataclasses
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.parse
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


# The relay a task with ``proxy_ports`` starts in its own network namespace (stdlib only, run
# as ``python -I`` on its file: the task's PYTHONPATH cannot change it).
NETRELAY = Path(__file__).resolve().parents[2] / "exec" / "_netrelay.py"


@dataclasses.dataclass(frozen=True)
class PrivateNet:
    """A task's own network namespace: ``ports`` (its ``proxy_ports``) are served only as
    unix sockets in ``service_dir`` for the master's proxy; 127.0.0.1:``master_port`` inside
    leads to the master's API through ``api_socket`` (docs/security.md, "Service ports")."""

    master_port: int
    api_socket: Path
    service_dir: Path
    ports: tuple[int, ...]

    def relay(self, argv: Sequence[str]) -> list[str]:
        out = [sys.executable, "-I", str(NETRELAY)]
        out += ["--master", f"{self.master_port}={self.api_socket}"]
        for port in self.ports:
            out += ["--serve", f"{port}={self.service_dir / f'{port}.sock'}"]
        return [*out, "--", *argv]


@dataclasses.dataclass(frozen=True)
class Mount:
    """A ``bind_mounts`` entry whose ``container_path`` is an absolute path other than its
    ``host_path``: bound there in the sandbox's view only."""

    host_path: str
    container_path: str
    read_only: bool = False


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
    # What an unlinked user's tasks run as on a root master (``security.default_task``).
    default_task: _identity.Identity = _identity.DEFAULT_TASK
    # The services directory and the master's API socket, made when first needed.
    _made: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

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

    def identity(
        self, conn: Any, owner_id: int, workspace_id: int | None
    ) -> _identity.Identity | None:
        """The OS identity the owner's task runs as: on a root master with a sandbox, the
        user's linked one (else ``default_task``) with the workspace's agent user/group over
        it; None (the master's own user) elsewhere: a master that is not root cannot change
        users, and without a sandbox
        the task could not reach its work dir in the master's data dir (0700)."""
        if not self.active or not _identity.applies():
            return None
        return _identity.resolve(conn, owner_id, workspace_id, self.default_task)

    def open_storage(self, paths: Iterable[str | Path], identity: _identity.Identity) -> None:
        """Storage directories the master made (those inside its data dir, as the default
        ``checkpoints``, and those that did not exist: it makes them now) become writable by
        every task's OS identity: 1777, as ``/tmp`` (each checkpoint is its writer's), their
        new parents 0755. Existing ones elsewhere are the operator's to make writable, as in
        0.37."""
        if identity.uid == os.geteuid():
            return
        for path in paths:
            p = Path(path)
            inside = (
                self.data_dir is not None and p.is_relative_to(self.data_dir) and p != self.data_dir
            )
            if not p.exists():
                missing = [q for q in [p, *p.parents] if not q.exists()]
                try:
                    p.mkdir(parents=True)
                except OSError:
                    continue  # bound if it comes to exist; the task reports the error itself
                for q in missing[1:]:
                    os.chmod(q, 0o755)
                inside = True
            if inside and p.is_dir():
                os.chmod(p, 0o1777)

    def _services(self) -> Path:
        """The master's directory of task service sockets (0700, short: a socket's path
        must fit 108 bytes), removed when the master exits."""
        with _LOCK:
            if "services" not in self._made:
                root = Path(tempfile.mkdtemp(prefix="det-svc-"))
                root.chmod(0o700)
                atexit.register(shutil.rmtree, root, True)
                self._made["services"] = root
            return Path(self._made["services"])

    def private_net(
        self, allocation_id: str, config: Any, master_url: str | None
    ) -> PrivateNet | None:
        """The private network of a task or trial of ``config`` when it has ``proxy_ports``
        and a sandbox runs it; None otherwise (its ports listen on the host's 127.0.0.1)."""
        ports = proxy_ports(config)
        if not self.active or not ports or not master_url:
            return None
        port = urllib.parse.urlsplit(master_url).port or 80
        root = self._services()
        with _LOCK:
            if "api" not in self._made:
                self._made["api"] = _relay_to_tcp(root / "api.sock", port)
        service_dir = root / allocation_id
        service_dir.mkdir(mode=0o700, exist_ok=True)
        return PrivateNet(port, root / "api.sock", service_dir, tuple(ports))

    def service_socket(self, allocation_id: str, port: int) -> str | None:
        """The unix socket that serves the allocation's proxy port ``port`` (a task in a
        private network), or None: the port is on 127.0.0.1."""
        root = self._made.get("services")
        if root is None:
            return None
        path = Path(root) / allocation_id / f"{port}.sock"
        return str(path) if path.exists() else None

    def drop_services(self, allocation_id: str) -> None:
        """Remove an ended allocation's service sockets."""
        root = self._made.get("services")
        if root is not None and allocation_id not in ("", ".", ".."):
            shutil.rmtree(Path(root) / allocation_id, ignore_errors=True)

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
        net: PrivateNet | None = None,
        groups: Sequence[int] = (),
        mounts: Sequence[Mount] = (),
        submitted: bool = False,
    ) -> list[str]:
        """``argv`` run inside the sandbox (itself when there is none). ``writable``: the
        task's work dir, storage paths and read-write bind mounts; ``read_only``: its
        environment and read-only mounts; ``mounts``: bind mounts whose ``container_path`` is
        another absolute path (there only in the sandbox's view, as in 0.37's container);
        ``caps``: capabilities it keeps (a root sshd's);
        ``identity``: the OS user it runs as (``_identity``), ``accounts`` the ``passwd`` and
        ``group`` files that name it inside; ``per_rank``: ``chdir`` holds one directory per
        Slurm task rank (``$SLURM_PROCID``), entered by the identity; ``net``: its own network
        namespace (``private_net``); ``groups``: the identity's supplementary groups;
        ``submitted``: bubblewrap starts as the identity already (a Slurm job submitted for
        it: bubblewrap then makes a user namespace, and no capability is kept)."""
        if identity is not None:
            argv = _identity.drop_to(identity, argv, chdir, per_rank, groups, submitted)
            caps = [] if submitted else [*caps, *_identity.SETPRIV_CAPS]
            chdir = None  # entered as the identity
        if self.bwrap is None:
            return list(argv)
        if net is not None:  # the relay runs before the drop to the identity: it makes sockets
            argv = net.relay(argv)
            writable = [*writable, net.service_dir]
            read_only = [*read_only, net.api_socket]
        out = [self.bwrap, "--dev", "/dev", "--proc", "/proc"]
        hidden = ["/tmp", "/var/tmp", "/dev/shm"]
        if self.data_dir is not None:
            hidden.append(str(self.data_dir))
        homes = [h for h in _homes() if h not in ("", "/")]
        if homes:
            # The master's user's home (its cloud credentials, ssh keys, det logins; $HOME and
            # its account's, 0700 for root): an empty writable one; the master's Python and
            # code stay where they are, read-only and reachable by a task's OS identity.
            hidden += homes
            read_only = [*python_paths(), *read_only]
        read_only, writable = list(read_only), list(writable)
        targets = [m.container_path for m in mounts]
        # Mounts outer ones first (by depth): a deeper one lands on what the outer one made, so
        # a hidden data dir inside a bound checkout (on the PYTHONPATH) stays hidden, and a
        # work dir bound inside the hidden data dir shows.
        binds: list[tuple[int, int, list[str]]] = []
        # The root is bubblewrap's own tmpfs with the host's top-level entries bound read-only
        # on it (not the host's / itself), so that a mount's container_path such as /data can
        # be made there.
        for name in sorted(os.listdir("/")):
            path = f"/{name}"
            if path in ("/proc", "/dev") or path in hidden:
                continue
            if os.path.islink(path):
                binds.append((2, -1, ["--symlink", os.readlink(path), path]))
            else:
                binds.append((2, 2, ["--ro-bind-try", path, path]))
        for path in hidden:
            perms = ["--perms", "1777"] if path in ("/tmp", "/var/tmp", "/dev/shm") else []
            binds.append((len(Path(path).parts), 0, [*perms, "--tmpfs", path]))
        # The directories leading to a bound path inside an emptied one: 0755, so that a task
        # running as its own OS user (``_identity``) can reach its work dir.
        for parent in _parents_within([*read_only, *writable, *targets], hidden):
            binds.append((len(Path(parent).parts), 1, ["--perms", "0755", "--dir", parent]))
        for path in dict.fromkeys(str(p) for p in read_only):
            binds.append((len(Path(path).parts), 2, ["--ro-bind-try", path, path]))
        for path in dict.fromkeys(str(p) for p in writable):
            binds.append((len(Path(path).parts), 3, ["--bind-try", path, path]))
        for m in mounts:
            how = "--ro-bind" if m.read_only else "--bind"
            depth = len(Path(m.container_path).parts)
            binds.append((depth, 4, [how, m.host_path, m.container_path]))
        for _, _, args in sorted(binds, key=lambda b: (b[0], b[1])):
            out += args
        if accounts is not None:
            out += ["--ro-bind", str(accounts[0]), "/etc/passwd"]
            out += ["--ro-bind", str(accounts[1]), "/etc/group"]
        out += ["--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL"]
        if net is not None:
            out.append("--unshare-net")
        if os.geteuid() == 0 and not submitted:
            for cap in caps:
                out += ["--cap-add", cap]
        if chdir is not None:
            out += ["--chdir", str(chdir)]
        return [*out, "--", *argv]


def _as_dict(config: Any) -> dict[str, Any]:
    return config if isinstance(config, dict) else config.to_json_dict()  # a typed config


def proxy_ports(config: Any) -> list[int]:
    """The ports of ``environment.proxy_ports`` (numbers or ``{proxy_port: N}``), in order."""
    config = _as_dict(config)
    environment = config.get("environment")
    entries = environment.get("proxy_ports") if isinstance(environment, dict) else None
    out: list[int] = []
    for entry in entries or []:
        value = entry.get("proxy_port") if isinstance(entry, dict) else entry
        try:
            out.append(int(str(value)))
        except (TypeError, ValueError):
            continue
    return list(dict.fromkeys(out))


_LOCK = threading.Lock()


def _relay_to_tcp(path: Path, port: int) -> socket.socket:
    """A unix socket at ``path`` (in the 0700 services directory) whose connections lead to
    127.0.0.1:``port`` (the master's API), served by daemon threads while the master runs."""
    from determined.exec import _netrelay

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    threading.Thread(
        target=_netrelay.serve, args=(listener, _netrelay.tcp(port)), daemon=True
    ).start()
    return listener


def _parents_within(paths: Iterable[str | Path], roots: Iterable[str]) -> list[str]:
    """The ancestors of ``paths`` strictly inside one of ``roots``, parents first."""
    found: set[Path] = set()
    root_paths = [Path(r) for r in roots]
    for path in paths:
        for parent in Path(path).parents:
            if any(parent != r and parent.is_relative_to(r) for r in root_paths):
                found.add(parent)
    return [str(p) for p in sorted(found, key=lambda p: (len(p.parts), str(p)))]


def _homes() -> list[str]:
    """The master's user's home directories: ``$HOME`` and its account's (they differ when
    the master was started with another ``HOME``), outer ones only."""
    homes = [os.path.expanduser("~")]
    try:
        homes.append(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        pass
    homes = [os.path.realpath(h) for h in homes if h]
    return [
        h
        for h in dict.fromkeys(homes)
        if not any(h != o and Path(h).is_relative_to(o) for o in homes)
    ]


def python_paths() -> list[str]:
    """What a task needs of the master's own Python: its interpreter's prefixes, the
    ``determined`` package's source tree and the PYTHONPATH entries (read-only)."""
    import determined

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix]
    paths.append(str(Path(determined.__file__).resolve().parent.parent))
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    # Real paths: bubblewrap cannot bind onto a symbolic link (a venv linked from elsewhere);
    # the link itself stays in the read-only system and leads to the bound target.
    paths = [os.path.realpath(p) for p in paths if p]
    return [p for p in dict.fromkeys(paths) if p not in ("", "/")]


def configure_sandbox(
    setting: str, data_dir: Path | None, default_task: _identity.Identity | None = None
) -> Sandbox:
    """The sandbox for ``task_isolation: setting``; ``default_task``: what an unlinked user's
    tasks run as on a root master (``_identity.DEFAULT_TASK`` unless given).

    Raises:
        SandboxError: an unknown setting, or ``bubblewrap`` where it cannot run.
    """
    if setting not in SETTINGS:
        raise SandboxError(f"task_isolation must be one of {', '.join(SETTINGS)}, not {setting!r}")
    default = default_task or _identity.DEFAULT_TASK
    if setting == "none":
        return Sandbox(setting, None, "task_isolation: none", data_dir, default)
    bwrap = shutil.which("bwrap")
    reason = "bubblewrap (bwrap) is not installed" if bwrap is None else _probe(bwrap)
    if reason is None:
        return Sandbox(setting, bwrap, "", data_dir, default)
    if setting == "bubblewrap":
        raise SandboxError(
            f"task_isolation: bubblewrap, but {reason}. Install bubblewrap (Debian/Ubuntu: "
            "apt-get install bubblewrap) and allow user namespaces, or choose "
            "task_isolation: auto or none"
        )
    return Sandbox(setting, None, reason, data_dir, default)


def _moved(entry: Any) -> Mount | None:
    """A ``bind_mounts`` entry as a :class:`Mount` when its ``container_path`` is absolute
    and not its ``host_path`` (relative ones are links in the work dir, ``_launcher``)."""
    if not isinstance(entry, dict) or not entry.get("host_path"):
        return None
    host, target = str(entry["host_path"]), str(entry.get("container_path") or "")
    if not os.path.isabs(target) or os.path.normpath(target) == os.path.normpath(host):
        return None
    return Mount(os.path.normpath(host), os.path.normpath(target), bool(entry.get("read_only")))


def moved_mounts(config: Any) -> list[Mount]:
    """The ``bind_mounts`` of ``config`` that :func:`_moved` keeps."""
    return [m for e in _as_dict(config).get("bind_mounts") or [] if (m := _moved(e))]


def storage_paths(config: Any) -> tuple[list[str], list[str]]:
    """(writable, read-only) host paths a task of ``config`` may use where they are: its
    checkpoint storage directory (``shared_fs``: ``host_path`` joined with ``storage_path``;
    ``directory``: ``container_path``, unless a moved mount holds it) and its ``bind_mounts``
    (``read_only`` ones read-only) other than the moved ones (:func:`moved_mounts`)."""
    config = _as_dict(config)
    writable: list[str] = []
    read_only: list[str] = []
    targets = [Path(m.container_path) for m in moved_mounts(config)]
    storage = config.get("checkpoint_storage")
    if isinstance(storage, dict):
        kind = storage.get("type")
        if kind == "shared_fs" and storage.get("host_path"):
            base = Path(str(storage["host_path"]))
            sub = storage.get("storage_path")
            writable.append(str(base / str(sub)) if sub else str(base))
        elif kind == "directory" and storage.get("container_path"):
            path = Path(str(storage["container_path"]))
            if not any(path.is_relative_to(t) for t in targets):
                writable.append(str(path))
    for entry in config.get("bind_mounts") or []:
        if isinstance(entry, dict) and entry.get("host_path") and _moved(entry) is None:
            target = read_only if entry.get("read_only") else writable
            target.append(str(entry["host_path"]))
    return writable, read_only


def make_paths(paths: Iterable[str | Path]) -> None:
    """Make the storage directories that do not exist yet (a bind needs its source)."""
    for path in paths:
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # bound if it comes to exist; the task reports the error itself
