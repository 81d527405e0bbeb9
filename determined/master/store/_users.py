"""Users, passwords and tokens.

Passwords: the reference's clients send ``sha512(salt + password)`` with ``isHashed: true``
(the empty password stays empty); the store keeps an argon2id hash of that value (salted, slow,
memory-hard: ``argon2-cffi``), or NULL for the empty password. Hashes of older masters (PBKDF2)
still check and are replaced by argon2id at the user's next successful login.

Tokens are random strings handed out once and stored as sha256 digests; a token
is either a user's login token or an allocation's token (a trial's process), which reaches only
its own allocation's and trial's objects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from typing import Any

import argon2
import sqlalchemy as sa

from determined.master._errors import Conflict, NotFound
from determined.master.store import _engine, _time, _token_cache
from determined.master.store._engine import inserted_id
from determined.master.store._schema import allocations, tokens, trials, users

PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"  # the reference clients' fixed client-side salt
# OWASP's argon2id minimum (19 MiB, 2 passes): ~30 ms a login here; argon2-cffi's defaults
# (64 MiB, 3 passes, 4 lanes) take ~250 ms on two shared cores.
_HASHER = argon2.PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)
DEFAULT_USERS = (("admin", True), ("determined", False))  # ids 1 and 2, as 0.37 seeds them


@dataclasses.dataclass(frozen=True)
class TokenInfo:
    """Who a token belongs to: ``kind`` "user" or "allocation" (then ``allocation_id``)."""

    user_id: int
    username: str
    admin: bool
    kind: str
    allocation_id: str | None


def client_hash(password: str) -> str:
    """What a reference client sends for ``password`` when ``isHashed`` is true."""
    if not password:
        return password
    return hashlib.sha512((PASSWORD_SALT + password).encode()).hexdigest()


def _stored_hash(hashed: str) -> str | None:
    """What the store keeps for a client-hashed password: argon2id, or None for ""."""
    return _HASHER.hash(hashed) if hashed else None


def _check(stored: str | None, hashed: str) -> bool:
    if stored is None:
        return hashed == ""
    if stored.startswith("pbkdf2_sha256$"):  # written by masters before argon2id
        _, rounds, salt, want = stored.split("$")
        got = hashlib.pbkdf2_hmac("sha256", hashed.encode(), salt.encode(), int(rounds)).hex()
        return hmac.compare_digest(got, want)
    try:
        return _HASHER.verify(stored, hashed)
    except argon2.exceptions.VerificationError:
        return False
    except argon2.exceptions.InvalidHashError:
        return False


def _needs_rehash(stored: str | None) -> bool:
    return stored is not None and (
        not stored.startswith("$argon2") or _HASHER.check_needs_rehash(stored)
    )


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def csrf_token(token: str) -> str:
    """The ``X-CSRF-Token`` a cookie-authenticated state-changing request must carry."""
    return hashlib.sha256(b"csrf:" + token.encode()).hexdigest()


def ensure_default_users(conn: sa.Connection) -> None:
    """Create ``determined`` and ``admin`` (admin) with empty passwords, once, as the reference
    does on its first start; existing users are left as they are."""
    for name, admin in DEFAULT_USERS:
        if conn.execute(sa.select(users.c.id).where(users.c.username == name)).first() is None:
            create_user(conn, name, "", admin=admin)


def create_user(conn: sa.Connection, username: str, password: str, *, admin: bool = False) -> int:
    """Add a user; ``password`` in clear text ("" for none). Returns its id."""
    row = conn.execute(
        users.insert().values(
            username=username,
            password_hash=_stored_hash(client_hash(password)),
            admin=admin,
            active=True,
            modified_at=_time.now(),
        )
    )
    return inserted_id(row)


def check_password(
    conn: sa.Connection, username: str, password: str, *, is_hashed: bool
) -> dict[str, Any] | None:
    """The user row if ``username`` exists and ``password`` matches, else None. The row may be
    of an inactive user: the caller refuses those with its own answer (0.37 says "user is not
    active" only to someone who knows the password)."""
    row = conn.execute(sa.select(users).where(users.c.username == username)).mappings().first()
    if row is None:
        return None
    hashed = password if is_hashed else client_hash(password)
    if not _check(row["password_hash"], hashed):
        return None
    if _needs_rehash(row["password_hash"]):
        conn.execute(
            users.update().where(users.c.id == row["id"]).values(password_hash=_stored_hash(hashed))
        )
    return dict(row)


def blank_password_users(conn: sa.Connection) -> list[str]:
    """The default users (``admin``, ``determined``) that are active with an empty password."""
    names = [name for name, _ in DEFAULT_USERS]
    q = sa.select(users.c.username).where(
        users.c.username.in_(names), users.c.password_hash.is_(None), users.c.active.is_(True)
    )
    return sorted(r[0] for r in conn.execute(q))


def get_user_by_name(conn: sa.Connection, username: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(users).where(users.c.username == username)).mappings().first()
    return None if row is None else dict(row)


def name_in_use(conn: sa.Connection, name: str, *, except_id: int | None = None) -> bool:
    """Whether another user than ``except_id`` has ``name`` as username or display name, case
    ignored (0.37 keeps display names apart from every user's names)."""
    lower = name.lower()
    q = sa.select(users.c.id).where(
        sa.or_(
            sa.func.lower(users.c.username) == lower,
            sa.func.lower(users.c.display_name) == lower,
        )
    )
    if except_id is not None:
        q = q.where(users.c.id != except_id)
    return conn.execute(q.limit(1)).first() is not None


def list_users(
    conn: sa.Connection,
    *,
    name: str | None = None,
    active: bool | None = None,
    admin: bool | None = None,
) -> list[dict[str, Any]]:
    """Users by id; ``name`` matches a part of the username or display name, any case."""
    q = sa.select(users).order_by(users.c.id)
    if name:
        pattern = (
            "%" + name.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        )
        q = q.where(
            sa.or_(
                sa.func.lower(users.c.username).like(pattern, escape="\\"),
                sa.func.lower(sa.func.coalesce(users.c.display_name, "")).like(
                    pattern, escape="\\"
                ),
            )
        )
    if active is not None:
        q = q.where(users.c.active.is_(active))
    if admin is not None:
        q = q.where(users.c.admin.is_(admin))
    return [dict(r) for r in conn.execute(q).mappings()]


def create_user_hashed(
    conn: sa.Connection,
    username: str,
    hashed: str,
    *,
    admin: bool = False,
    active: bool = True,
    display_name: str | None = None,
) -> int:
    """Add a user whose password arrives client-hashed (``client_hash``). Raises
    Conflict (409) when the username is taken."""
    if get_user_by_name(conn, username) is not None:
        raise Conflict(f"user {username!r} already exists; pick another username")
    row = conn.execute(
        users.insert().values(
            username=username,
            password_hash=_stored_hash(hashed),
            admin=admin,
            active=active,
            display_name=display_name or None,
            modified_at=_time.now(),
        )
    )
    return inserted_id(row)


def update_user(conn: sa.Connection, user_id: int, **values: Any) -> dict[str, Any]:
    """Change a user's ``username``, ``display_name``, ``admin``, ``active``,
    ``agent_user_group`` or ``password`` (client-hashed). Deactivating a user or changing its
    password revokes its tokens (those of its running trials too), so they stop working at
    once. Returns the row as it is now."""
    require_user(conn, user_id)
    row: dict[str, Any] = {}
    for key in ("username", "display_name", "admin", "active", "agent_user_group"):
        if key in values:
            row[key] = values[key]
    if "username" in row:
        other = get_user_by_name(conn, row["username"])
        if other is not None and int(other["id"]) != user_id:
            raise Conflict(f"user {row['username']!r} already exists; pick another username")
    if "password" in values:
        row["password_hash"] = _stored_hash(values["password"])
    row["modified_at"] = _time.now()
    conn.execute(users.update().where(users.c.id == user_id).values(**row))
    if values.get("active") is False or "password" in values:
        _revoke_user_tokens(conn, user_id, keep=values.get("keep_token"))
    # Cached principals carry the user's name and admin flag: read them again.
    every = sa.select(tokens.c.digest).where(tokens.c.user_id == user_id)
    _token_cache.forget_after_commit(conn, digests=[r[0] for r in conn.execute(every)])
    return require_user(conn, user_id)


def _revoke_user_tokens(conn: sa.Connection, user_id: int, keep: str | None = None) -> None:
    """Revoke the user's login tokens (all but ``keep``, the caller's own, when given)."""
    q = sa.select(tokens.c.digest).where(
        tokens.c.user_id == user_id, tokens.c.kind == "user", tokens.c.revoked.is_(False)
    )
    digests = [r[0] for r in conn.execute(q)]
    if keep is not None:
        digests = [d for d in digests if d != token_digest(keep)]
    if digests:
        conn.execute(tokens.update().where(tokens.c.digest.in_(digests)).values(revoked=True))
        _token_cache.forget_after_commit(conn, digests=digests)


def get_user(conn: sa.Connection, user_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(users).where(users.c.id == user_id)).mappings().first()
    return None if row is None else dict(row)


def users_by_id(conn: sa.Connection, user_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """``get_user`` for many users: those that exist, by id."""
    return _engine.rows_by_id(conn, users, user_ids)


def require_user(conn: sa.Connection, user_id: int) -> dict[str, Any]:
    """The user's row. Raises NotFound (404) when there is none."""
    user = get_user(conn, user_id)
    if user is None:
        raise NotFound(f"user {user_id} not found")
    return user


def user_id_by_name(conn: sa.Connection, username: str) -> int | None:
    row = conn.execute(sa.select(users.c.id).where(users.c.username == username)).first()
    return None if row is None else int(row[0])


def issue_token(
    conn: sa.Connection, user_id: int, *, kind: str = "user", allocation_id: str | None = None
) -> str:
    """A new token for ``user_id`` (an allocation's when ``allocation_id`` is given)."""
    token = secrets.token_urlsafe(32)
    conn.execute(
        tokens.insert().values(
            digest=token_digest(token),
            kind=kind,
            user_id=user_id,
            allocation_id=allocation_id,
            created_at=_time.now(),
            revoked=False,
        )
    )
    return token


@dataclasses.dataclass(frozen=True)
class TokenOwner:
    """A live token's owner as the database has it: its user (``info``) and, for an
    allocation's token, the fields of its allocation and trial that never change
    (ALLOCATION_KEYS, TRIAL_KEYS; None where that row no longer exists)."""

    info: TokenInfo
    allocation: dict[str, Any] | None = None
    trial: dict[str, Any] | None = None


# What a token's owner keeps of its allocation and trial: set when they are created, never
# updated (a cached principal may hold them as long as its token lives).
ALLOCATION_KEYS = ("id", "task_id", "trial_id", "run_id")
TRIAL_KEYS = ("id", "experiment_id", "task_id", "warm_start_checkpoint")

# Built once: every token read runs it.
_OWNERS = (
    sa.select(tokens.c.digest, tokens.c.kind, tokens.c.allocation_id)
    .add_columns(users.c.id, users.c.username, users.c.admin, users.c.active)
    .add_columns(*(allocations.c[k].label(f"alloc_{k}") for k in ALLOCATION_KEYS))
    .add_columns(*(trials.c[k].label(f"trial_{k}") for k in TRIAL_KEYS))
    .join(users, users.c.id == tokens.c.user_id)
    .outerjoin(allocations, allocations.c.id == tokens.c.allocation_id)
    .outerjoin(trials, trials.c.id == allocations.c.trial_id)
    .where(tokens.c.digest.in_(sa.bindparam("digests", expanding=True)))
    .where(tokens.c.revoked.is_(False))
)


def token_owners(conn: sa.Connection, digests: Iterable[str]) -> dict[str, TokenOwner]:
    """The owners of the live tokens among ``digests``, by digest; unknown and revoked tokens
    and those of deactivated users are left out. One query for up to 500 tokens: a master that
    restarts under 800 running trials reads all their tokens at once."""
    wanted = list(dict.fromkeys(digests))
    found: dict[str, TokenOwner] = {}
    for at in range(0, len(wanted), _engine.IN_CHUNK):
        chunk = wanted[at : at + _engine.IN_CHUNK]
        for row in conn.execute(_OWNERS, {"digests": chunk}).mappings():
            if not row["active"]:
                continue
            info = TokenInfo(
                user_id=row["id"],
                username=row["username"],
                admin=bool(row["admin"]),
                kind=row["kind"],
                allocation_id=row["allocation_id"],
            )
            allocation = trial = None
            if info.kind == "allocation" and row["allocation_id"] is not None:
                allocation = _fields(row, "alloc_", ALLOCATION_KEYS)
                trial = _fields(row, "trial_", TRIAL_KEYS)
            found[row["digest"]] = TokenOwner(info, allocation, trial)
    return found


def _fields(row: Any, prefix: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The ``keys`` of an outer-joined row's ``prefix``ed columns; None where it joined none
    (its id is NULL)."""
    if row[f"{prefix}id"] is None:
        return None
    return {k: row[prefix + k] for k in keys}


def revoke_token(conn: sa.Connection, token: str) -> None:
    digest = token_digest(token)
    conn.execute(tokens.update().where(tokens.c.digest == digest).values(revoked=True))
    _token_cache.forget_after_commit(conn, digests=[digest])


def revoke_allocation_tokens(conn: sa.Connection, allocation_id: str) -> None:
    """Called when an allocation ends: its processes may no longer report."""
    conn.execute(
        tokens.update().where(tokens.c.allocation_id == allocation_id).values(revoked=True)
    )
    _token_cache.forget_after_commit(conn, allocation_ids=[allocation_id])


def user_json(row: dict[str, Any]) -> dict[str, Any]:
    """``v1User`` as the gateway writes it."""
    return {
        "id": row["id"],
        "username": row["username"],
        "admin": bool(row["admin"]),
        "active": bool(row["active"]),
        "agentUserGroup": row.get("agent_user_group"),
        "displayName": row["display_name"] or "",
        "modifiedAt": _time.rfc3339(row["modified_at"]),
        "remote": False,
        "lastAuthAt": None,
    }
