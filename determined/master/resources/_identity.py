"""The OS identity a task runs as (0.37's agent user/group, docs/security.md).

A master running as root with a sandbox runs the tasks of a linked user (``det user
link-with-agent-user``, or the ``agentUserGroup`` of the workspace the task or experiment is
in, which wins) as that uid/gid, and an unlinked user's as ``security.default_task``
(:data:`DEFAULT_TASK` unless configured): its work dir becomes theirs, inside the sandbox
``/etc/passwd`` and ``/etc/group`` name them (as 0.37's containers do), and ``setpriv`` drops
to them after bubblewrap has set the sandbox up. A master that is not root, or has no
sandbox, runs every task as itself (``_sandbox.Sandbox.identity``).
"""

from __future__ import annotations

import dataclasses
import errno
import grp
import logging
import os
import pwd
import re
import stat
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

import sqlalchemy as sa

from determined.master._errors import InvalidArgument

logger = logging.getLogger("determined.master")
_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$", re.IGNORECASE)
_MAX_ID = 2**32 - 2  # (uid_t)-1 means "no change" to the kernel
SETPRIV = "setpriv"
# What setpriv needs inside the sandbox to drop to the identity (gone once it has).
SETPRIV_CAPS = ("CAP_SETUID", "CAP_SETGID")


@dataclasses.dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    user: str
    group: str


# What a root master's sandbox runs an unlinked user's tasks as, unless the master config's
# ``security.default_task`` names another account: 0.37's documented unprivileged task user
# (uid/gid 65533, named inside the sandbox even without a host account; the Slurm resource
# manager makes the host account, :func:`ensure_account`). Its name is word characters only:
# 0.37's e2e tests parse ``id`` with ``\w+``. 0.37's own default, root, only when the operator
# asks for it (docs/security.md).
DEFAULT_TASK = Identity(65533, 65533, "det_nobody", "det_nobody")
# The default account's name before (renamed on the host where it was made, ensure_account).
OLD_DEFAULT_NAME = "det-nobody"


def parse_default_task(value: Any) -> Identity:
    """``security.default_task`` of the master config: 0.37's mapping ``{user, uid, group,
    gid}``, or ``user:uid:group:gid`` (``--default-task``).

    Raises:
        ValueError: a missing or bad field, saying which.
    """
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 4:
            raise ValueError(f"default task user must be user:uid:group:gid, not {value!r}")
        value = dict(zip(("user", "uid", "group", "gid"), parts, strict=True))
        for key in ("uid", "gid"):
            try:
                value[key] = int(value[key])
            except ValueError as e:
                raise ValueError(
                    f"default task {key} must be an integer, not {value[key]!r}"
                ) from e
    if not isinstance(value, dict) or set(value) != {"user", "uid", "group", "gid"}:
        raise ValueError(
            f"security.default_task must map user, uid, group and gid (all four), not {value!r}"
        )
    try:
        checked = check_agent_user_group(
            {
                "agentUid": value["uid"],
                "agentGid": value["gid"],
                "agentUser": value["user"],
                "agentGroup": value["group"],
            }  # fmt: skip
        )
    except InvalidArgument as e:
        raise ValueError(f"security.default_task: {e}".replace("agentUserGroup.", "")) from e
    assert checked is not None
    return Identity(
        checked["agentUid"], checked["agentGid"], checked["agentUser"], checked["agentGroup"]
    )


def check_agent_user_group(value: Any) -> dict[str, Any] | None:
    """``agentUserGroup`` of a user as stored: all four of ``agentUid``, ``agentGid``,
    ``agentUser``, ``agentGroup``, or None (an empty mapping unlinks).

    Raises:
        InvalidArgument: a missing or bad field.
    """
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise InvalidArgument("agentUserGroup must be a mapping of agentUid, agentGid, ...")
    out: dict[str, Any] = {}
    for key in ("agentUid", "agentGid"):
        v = value.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_ID:
            raise InvalidArgument(f"agentUserGroup.{key} must be an integer 0..{_MAX_ID}")
        out[key] = v
    for key in ("agentUser", "agentGroup"):
        v = value.get(key)
        if not isinstance(v, str) or not _NAME.match(v):
            raise InvalidArgument(
                f"agentUserGroup.{key} must be a user or group name (letters, digits, _ . -)"
            )
        out[key] = v
    unknown = sorted(set(value) - set(out))
    if unknown:
        raise InvalidArgument(f"agentUserGroup: unknown keys {', '.join(unknown)}")
    return out


def _of(group: Any) -> Identity | None:
    if not isinstance(group, dict):
        return None
    try:
        checked = check_agent_user_group(group)
    except InvalidArgument:
        return None  # a workspace's partial setting (only some fields recorded)
    if checked is None:
        return None
    return Identity(
        checked["agentUid"], checked["agentGid"], checked["agentUser"], checked["agentGroup"]
    )


def _override(base: Identity, group: Any) -> Identity:
    """``base`` with the pairs a workspace's partial ``agentUserGroup`` sets (agentUid with
    agentUser, agentGid with agentGroup; 0.37's workspace settings override the user's field by
    field): a workspace that names only a group runs its tasks in that group."""
    if not isinstance(group, dict):
        return base
    uid, user = group.get("agentUid"), group.get("agentUser")
    gid, name = group.get("agentGid"), group.get("agentGroup")
    if _valid_id(uid) and isinstance(user, str) and _NAME.match(user):
        base = dataclasses.replace(base, uid=uid, user=user)
    if _valid_id(gid) and isinstance(name, str) and _NAME.match(name):
        base = dataclasses.replace(base, gid=gid, group=name)
    return base


def _valid_id(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_ID


def resolve(
    conn: sa.Connection, owner_id: int, workspace_id: int | None, default: Identity | None = None
) -> Identity | None:
    """The identity the owner's task in ``workspace_id`` runs as when the master is root: the
    user's linked one (else ``default``), with what the workspace's agent user/group sets
    over it; None: neither is linked and there is no default."""
    from determined.master.store import _schema

    row = conn.execute(
        sa.select(_schema.users.c.agent_user_group).where(_schema.users.c.id == owner_id)
    ).first()
    base = (_of(row[0]) if row is not None else None) or default
    ws = None
    if workspace_id:
        found = conn.execute(
            sa.select(_schema.workspaces.c.agent_user_group).where(
                _schema.workspaces.c.id == workspace_id
            )
        ).first()
        ws = found[0] if found is not None else None
    whole = _of(ws)
    if whole is not None:
        return whole
    return None if base is None else _override(base, ws)


def experiment_workspace(conn: sa.Connection, experiment_id: int) -> int | None:
    """The workspace of the experiment's project."""
    from determined.master.store import _schema

    e, p = _schema.experiments, _schema.projects
    row = conn.execute(
        sa.select(p.c.workspace_id)
        .select_from(e.join(p, e.c.project_id == p.c.id))
        .where(e.c.id == experiment_id)
    ).first()
    return None if row is None else int(row[0])


def applies() -> bool:
    """Whether this master can run tasks as other OS users (it runs as root)."""
    return os.geteuid() == 0


def hand_over(identity: Identity, work_dir: Path, environment: Path) -> None:
    """The work dir (and all in it) becomes the identity's; the environment readable by it:
    its contents by everyone, its top directory (0700) by the identity only, through an ACL
    entry (0755 where the file system has no ACLs), so that search permission on ``envs/``
    (:func:`grant_search`) opens no other environment."""
    for root, dirs, files in os.walk(work_dir):
        os.chown(root, identity.uid, identity.gid)
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), identity.uid, identity.gid)
    for root, _dirs, files in os.walk(environment):
        os.chmod(root, 0o755)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)
    if environment.is_dir() and identity.uid != os.geteuid():
        try:
            os.chmod(environment, 0o700)
            _acl_allow(environment, identity.uid, 0o5)
        except OSError:
            os.chmod(environment, 0o755)


# POSIX ACLs as Linux stores them (``system.posix_acl_access``: a version, then entries of
# tag, permissions and id, sorted by tag and id); no dependency on the acl tools.
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF


def _acl_allow(path: str | Path, uid: int, perms: int) -> None:
    """Add ``perms`` (rwx bits) for ``uid`` to ``path``'s access ACL (made from its mode when
    it has none); the mask opens to what the named entries need, the owning group keeps its
    own entry. Raises OSError (``ENOTSUP`` where the file system has no ACLs)."""
    try:
        raw = os.getxattr(path, _ACL_XATTR)
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.ENOTSUP):
            raise
        raw = b""
    entries: dict[tuple[int, int], int] = {}
    if len(raw) >= 4 and struct.unpack_from("<I", raw)[0] == _ACL_VERSION:
        for off in range(4, len(raw) - 7, 8):
            tag, perm, ident = struct.unpack_from("<HHI", raw, off)
            entries[(tag, ident)] = perm
    else:
        mode = os.stat(path).st_mode
        entries = {(_USER_OBJ, _NO_ID): (mode >> 6) & 7, (_GROUP_OBJ, _NO_ID): (mode >> 3) & 7,
                   (_OTHER, _NO_ID): mode & 7}  # fmt: skip
    entries[(_USER, uid)] = entries.get((_USER, uid), 0) | perms
    entries[(_MASK, _NO_ID)] = 0
    mask = 0
    for (tag, _), perm in entries.items():
        if tag in (_USER, _GROUP_OBJ, _GROUP):
            mask |= perm
    entries[(_MASK, _NO_ID)] = mask
    out = struct.pack("<I", _ACL_VERSION)
    for (tag, ident), perm in sorted(entries.items()):
        out += struct.pack("<HHI", tag, perm, ident)
    os.setxattr(path, _ACL_XATTR, out)


def grant_search(paths: Sequence[str | Path], uid: int) -> None:
    """Search permission (``x``, never read: nothing there can be listed) for ``uid`` on every
    directory leading to ``paths`` that it could not search otherwise (mode bits checked for
    its owner and others), so a process of ``uid`` reaches them by name: a Slurm job submitted
    for a task's identity, whose bubblewrap binds them. Files and directories on the way keep
    their own modes (the master's are 0600 and 0700). Raises OSError: no ACLs there."""
    seen: set[Path] = set()
    for path in paths:
        for parent in reversed(Path(os.path.abspath(path)).parents):
            if parent in seen:
                continue
            seen.add(parent)
            try:
                st = os.stat(parent)
            except FileNotFoundError:
                break
            if st.st_mode & stat.S_IXOTH or (st.st_uid == uid and st.st_mode & stat.S_IXUSR):
                continue
            _acl_allow(parent, uid, 0o1)


def host_account(identity: Identity) -> bool:
    """Whether this host knows the identity's uid and gid (Slurm submits a job only for ids
    it can name)."""
    try:
        pwd.getpwuid(identity.uid)
        grp.getgrgid(identity.gid)
    except KeyError:
        return False
    return True


def ensure_account(identity: Identity) -> list[str]:
    """The default task account on this host, for Slurm (which runs jobs only for ids it
    knows): its group and user made (system ones, no home, no login shell) where neither
    the name nor the id exists; an older master's default (``det-nobody``, same id) renamed.
    An id another account holds is left as it is (its name is what Slurm shows). Returns what
    was done, for the master's log; raises nothing (a failure is said there too)."""
    done: list[str] = []
    try:
        group = grp.getgrgid(identity.gid).gr_name
    except KeyError:
        group = None
    try:
        user = pwd.getpwuid(identity.uid).pw_name
    except KeyError:
        user = None
    try:
        if group == OLD_DEFAULT_NAME:
            _run(["groupmod", "-n", identity.group, OLD_DEFAULT_NAME])
            done.append(f"renamed the host group {OLD_DEFAULT_NAME} to {identity.group}")
        elif group is None and not _exists(grp.getgrnam, identity.group):
            _run(["groupadd", "--system", "-g", str(identity.gid), identity.group])
            done.append(f"made the host group {identity.group} (gid {identity.gid})")
        if user == OLD_DEFAULT_NAME:
            _run(["usermod", "-l", identity.user, OLD_DEFAULT_NAME])
            done.append(f"renamed the host account {OLD_DEFAULT_NAME} to {identity.user}")
        elif user is None and not _exists(pwd.getpwnam, identity.user):
            _run(["useradd", "--system", "-u", str(identity.uid), "-g", str(identity.gid), "-M",
                  "-d", "/nonexistent", "-s", "/usr/sbin/nologin", identity.user])  # fmt: skip
            done.append(f"made the host account {identity.user} (uid {identity.uid})")
        elif user not in (None, OLD_DEFAULT_NAME, identity.user):
            done.append(f"uid {identity.uid} is the host account {user!r}: Slurm shows that name")
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        done.append(f"cannot make the host account {identity.user}: {str(detail).strip()}")
    return done


def _exists(lookup: Any, name: str) -> bool:
    try:
        lookup(name)
    except KeyError:
        return False
    return True


def _run(args: list[str]) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=30)


def account_files(identity: Identity, into: Path, home: Path) -> tuple[Path, Path]:
    """``passwd`` and ``group`` files for the sandbox: the system's, with the identity's
    entries (replacing any with its name or id), written into ``into`` (root's, 0644)."""
    into.mkdir(parents=True, exist_ok=True)
    passwd = [
        line
        for line in Path("/etc/passwd").read_text().splitlines()
        if line.split(":")[0] != identity.user and line.split(":")[2:3] != [str(identity.uid)]
    ]
    passwd.append(f"{identity.user}:x:{identity.uid}:{identity.gid}:det task:{home}:/bin/sh")
    groups = [
        line
        for line in Path("/etc/group").read_text().splitlines()
        if line.split(":")[0] != identity.group and line.split(":")[2:3] != [str(identity.gid)]
    ]
    groups.append(f"{identity.group}:x:{identity.gid}:")
    out_passwd, out_group = into / "passwd", into / "group"
    out_passwd.write_text("\n".join(passwd) + "\n")
    out_group.write_text("\n".join(groups) + "\n")
    for path in (into, out_passwd, out_group):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return out_passwd, out_group


def tty_groups() -> list[int]:
    """The ``tty`` group (for a shell's sshd: it gives each session's pty that group, which a
    non-root sshd may do only as a member; the pty is the sandbox's own devpts)."""
    try:
        return [grp.getgrnam("tty").gr_gid]
    except KeyError:
        return []


def drop_to(
    identity: Identity,
    argv: Sequence[str],
    cwd: str | Path | None = None,
    per_rank: bool = False,
    groups: Sequence[int] = (),
    submitted: bool = False,
) -> list[str]:
    """``argv`` run as the identity (inside the sandbox, by setpriv), no supplementary
    groups but ``groups``, no capabilities left; in ``cwd`` (entered as the identity: its
    work dir is 0700 and its own, which root without capabilities cannot enter), or with
    ``per_rank`` in its ``$SLURM_PROCID`` subdirectory (a Slurm job's task), which is also its
    ``HOME``. ``submitted``: it runs as the identity already (a Slurm job submitted for it):
    no setpriv, only the directory and ``HOME``."""
    out = [] if submitted else [
        SETPRIV,
        f"--reuid={identity.uid}",
        f"--regid={identity.gid}",
        f"--groups={','.join(str(g) for g in groups)}" if groups else "--clear-groups",
        "--inh-caps=-all",
        "--",
    ]  # fmt: skip
    if cwd is not None:
        into = '"$0/$SLURM_PROCID"' if per_rank else '"$0"'
        # Its home is its work dir (the master's user's is hidden and not theirs).
        out += ["sh", "-c", f'cd {into} && export HOME="$PWD" && exec "$@"', str(cwd)]
    return [*out, *argv]
