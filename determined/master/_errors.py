"""Errors the master's domain code raises; ``_app`` maps each to its HTTP status and the
gateway's error body ``{"code", "message", "details"}``.

Hierarchy::

    ApiError
     ├── InvalidArgument   400  bad input: say what and how to fix it
     ├── FailedPrecondition 400 wrong state for the request ("experiment in terminal state")
     ├── Unauthenticated   401  no token, or not a valid one
     ├── PermissionDenied  403  a valid token that may not touch this object
     ├── NotFound          404  no such object, or no data yet
     ├── Conflict          409  the object exists already
     └── Unavailable       503  try again: the master could not do it now
"""

from __future__ import annotations


class ApiError(Exception):
    """An error the master answers with; ``status`` is HTTP, ``code`` the gRPC code. A
    subclass names its own: ``class Gone(ApiError, status=410, code=5)``."""

    status = 500
    code = 13  # INTERNAL

    def __init_subclass__(cls, *, status: int | None = None, code: int | None = None) -> None:
        super().__init_subclass__()
        cls.status = cls.status if status is None else status
        cls.code = cls.code if code is None else code

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# The domain's errors (see the hierarchy above), by gRPC code.
class InvalidArgument(ApiError, status=400, code=3): ...


class FailedPrecondition(ApiError, status=400, code=9): ...


class Unauthenticated(ApiError, status=401, code=16): ...


class PermissionDenied(ApiError, status=403, code=7): ...


class NotFound(ApiError, status=404, code=5): ...


class Conflict(ApiError, status=409, code=6): ...


class Unavailable(ApiError, status=503, code=14): ...


class Unimplemented(ApiError, status=501, code=12):
    """A route of 0.37 this master serves only to say it does not do that yet."""
