"""Users, passwords and tokens.

Passwords: the reference's clients send ``sha512(salt + password)`` with ``isHashed: true``
(the empty password stays empty); the store keeps a salted PBKDF2 of that value, or NULL for the
empty password. Tokens are random strings handed out once and stored as sha256 digests; a token
is either a user's login token or an allocation's token (a trial's process), which reaches only
its own allocation's and trial's objects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from typing import Any

import sqlalchemy as sa

from determined.master._errors import NotFound
from determined.master.store import _time, _token_cache
from determined.master.store._engine import inserted_id
from determined.master.store._schema import tokens, users

PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"  # the reference clients' fixed client-side salt
_PBKDF2_ROUNDS = 100_000
DEFAULT_USERS = (("determined", False), ("admin", True))


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
    if not hashed:
        return None
    salt = secrets.token_hex(16)
    digest = hashlib.pbkdf2_hmac("sha256", hashed.encode(), salt.encode(), _PBKDF2_ROUNDS)
    return f"pbkdf2_sha256${_PBKDF2_ROUNDS}${salt}${digest.hex()}"


def _check(stored: str | None, hashed: str) -> bool:
    if stored is None:
        return hashed == ""
    _, rounds, salt, want = stored.split("$")
    got = hashlib.pbkdf2_hmac("sha256", hashed.encode(), salt.encode(), int(rounds)).hex()
    return hmac.compare_digest(got, want)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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
    """The user row if ``username`` exists, is active and ``password`` matches, else None."""
    row = conn.execute(sa.select(users).where(users.c.username == username)).mappings().first()
    if row is None or not row["active"]:
        return None
    hashed = password if is_hashed else client_hash(password)
    return dict(row) if _check(row["password_hash"], hashed) else None


def get_user(conn: sa.Connection, user_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(users).where(users.c.id == user_id)).mappings().first()
    return None if row is None else dict(row)


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


# Built once: every request runs it.
_LOOKUP_TOKEN = (
    sa.select(tokens.c.kind, tokens.c.allocation_id, users.c.id, users.c.username)
    .add_columns(users.c.admin, users.c.active)
    .join(users, users.c.id == tokens.c.user_id)
    .where(tokens.c.digest == sa.bindparam("digest"), tokens.c.revoked.is_(False))
)


def lookup_token(conn: sa.Connection, token: str) -> TokenInfo | None:
    """The owner of a live token, or None (unknown, revoked, or its user deactivated)."""
    row = conn.execute(_LOOKUP_TOKEN, {"digest": token_digest(token)}).mappings().first()
    if row is None or not row["active"]:
        return None
    return TokenInfo(
        user_id=row["id"],
        username=row["username"],
        admin=bool(row["admin"]),
        kind=row["kind"],
        allocation_id=row["allocation_id"],
    )


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
        "agentUserGroup": None,
        "displayName": row["display_name"] or "",
        "modifiedAt": _time.rfc3339(row["modified_at"]),
        "remote": False,
        "lastAuthAt": None,
    }
