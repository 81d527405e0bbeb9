"""Errors raised by redetermined.

Hierarchy::

    BaseException
     └── InvalidExperimentException      (BaseException, as in Determined 0.37: see docs/core.md)
    Exception
     ├── InternalException               a bug or broken invariant inside redetermined
     ├── CheckpointNotFound              no checkpoint with that storage id
     ├── CheckpointCorrupted             a checkpoint's files do not match its manifest
     │    └── CheckpointIncomplete       a checkpoint that was never committed, or lost files
     ├── StorageConfigError (ValueError) a checkpoint_storage setting that cannot be used
     ├── InvalidSearcherConfig (ValueError)  a searcher/hyperparameters section that cannot run
     ├── InvalidExperimentConfig (ValueError)  an experiment config that fails validation
     ├── SearcherEventRejected (ValueError)  an event a search method cannot accept
     │    └── InvalidSearcherMetric      a non-numeric searcher metric where trials are ranked
     ├── DistributedTimeout (TimeoutError)  a peer that never connected, or stopped answering
     ├── DistributedPeerLost (ConnectionError)  a peer of a DistributedContext went away
     ├── MasterError                     the master answered with an error
     │    ├── MasterNotFound (404)
     │    ├── BadRequest (400)
     │    └── Unauthenticated (401)
     └── MasterUnreachable (ConnectionError)  retries exhausted

``det.InvalidHP`` lives in ``determined/_trial.py`` because user code raises it, not us.
"""

from __future__ import annotations

from typing import Any


class InvalidExperimentException(BaseException):
    """A trial was set up in a way that cannot work (for example ``wrap_scaler`` after
    ``wrap_model``). Derives from BaseException, as in Determined 0.37, so that existing
    ``except InvalidExperimentException`` and ``except BaseException`` handlers keep working."""


class InternalException(Exception):
    """An internal invariant was broken; please report it."""


class CheckpointNotFound(Exception):
    """No checkpoint exists under the given storage id."""


class CheckpointCorrupted(Exception):
    """A checkpoint's files do not match the sizes or sha256 sums in its manifest."""

    def __init__(self, message: str, *, storage_id: str = "", path: str = "") -> None:
        super().__init__(message)
        self.storage_id = storage_id
        self.path = path


class CheckpointIncomplete(CheckpointCorrupted):
    """A checkpoint was never committed (no manifest) or files listed in its manifest are gone."""


class CheckpointFailed(RuntimeError):
    """A checkpoint written in the background was not saved; nothing of it was registered."""


class StorageConfigError(ValueError):
    """A ``checkpoint_storage`` configuration that cannot be used, with what to change."""


class DistributedTimeout(TimeoutError):
    """A peer of a DistributedContext never connected or stopped answering within the timeout."""


class DistributedPeerLost(ConnectionError):
    """A peer of a DistributedContext disconnected (died, or closed its context) while this rank
    was waiting on it in a collective, or before the collective started."""


class EnterpriseOnlyError(Exception):
    """A feature of 0.37's enterprise edition that this master has not (the OAuth clients of
    SCIM provisioning, for one); 0.37's open-source edition raises the same."""


class MasterError(Exception):
    """The master answered a request with an error status."""

    def __init__(self, message: str, *, status: int = 0, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class BadRequest(MasterError):
    """HTTP 400: the master rejected the request's content."""


class Unauthenticated(MasterError):
    """HTTP 401: missing or invalid token."""


class MasterNotFound(MasterError):
    """HTTP 404: the object does not exist or has no data yet."""


class MasterUnreachable(ConnectionError):
    """The master could not be reached, even after retrying. ``maybe_delivered``: whether an
    attempt may have reached it all the same (False: every attempt failed to connect)."""

    maybe_delivered: bool = True


class InvalidSearcherConfig(ValueError):
    """A ``searcher`` or ``hyperparameters`` section that cannot run, with what to change."""


class SearcherEventRejected(ValueError):
    """The search method cannot accept this event (unknown trial, an operation completed twice
    or with a length it never asked for); nothing was changed."""


class InvalidSearcherMetric(SearcherEventRejected):
    """The searcher metric reported for a trial is not a number, but the method ranks trials."""


class InvalidExperimentConfig(ValueError):
    """An experiment config failed validation. ``problems`` holds one ``(key_path, message)``
    pair per problem (key paths like ``searcher.max_length``); the message lists them all, one
    per line, so the master can return it as HTTP 400 and the CLI can print it."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = list(problems)
        lines = [f"  {path or '<config>'}: {msg}" for path, msg in self.problems]
        super().__init__("invalid experiment config:\n" + "\n".join(lines))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))


__all__ = [
    "BadRequest",
    "CheckpointCorrupted",
    "CheckpointFailed",
    "CheckpointIncomplete",
    "CheckpointNotFound",
    "DistributedPeerLost",
    "DistributedTimeout",
    "InternalException",
    "InvalidExperimentConfig",
    "InvalidExperimentException",
    "InvalidSearcherConfig",
    "InvalidSearcherMetric",
    "MasterError",
    "MasterNotFound",
    "MasterUnreachable",
    "SearcherEventRejected",
    "StorageConfigError",
    "Unauthenticated",
]
