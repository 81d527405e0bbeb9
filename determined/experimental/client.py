"""The module-level SDK, as Determined 0.37's ``determined.experimental.client``:

.. code:: python

    from determined.experimental import client

    # After `det user login` (or with DET_MASTER set and the default user), no login() is needed.
    exp = client.create_experiment(config="const.yaml", model_dir=".")
    exp.wait()
    best = exp.list_checkpoints(max_results=1)[0]
    path = best.download()

Every function uses one :class:`Determined` made on first use (or by :func:`login`); a script
that talks to several masters makes ``Determined(...)`` objects itself. See docs/sdk.md.
"""

from __future__ import annotations

import functools
import logging
import pathlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from determined.experimental._sdk import _oauth
from determined.experimental._sdk._checkpoint import (
    Checkpoint,
    CheckpointStateError,
    CheckpointTrainingMetadata,
    DownloadFailed,
)
from determined.experimental._sdk._determined import Determined
from determined.experimental._sdk._enums import (
    CheckpointOrderBy,
    CheckpointSortBy,
    CheckpointState,
    DownloadMode,
    ExperimentOrderBy,
    ExperimentSortBy,
    ExperimentState,
    LogLevel,
    ModelOrderBy,
    ModelSortBy,
    OrderBy,
    TrialOrderBy,
    TrialSortBy,
    TrialState,
)
from determined.experimental._sdk._experiment import Experiment, Trial
from determined.experimental._sdk._metrics import TrainingMetrics, TrialMetrics, ValidationMetrics
from determined.experimental._sdk._model import Model, ModelVersion
from determined.experimental._sdk._oauth import Oauth2ScimClient
from determined.experimental._sdk._project import Project
from determined.experimental._sdk._resource_pool import ResourcePool, ResourcePoolBindingError
from determined.experimental._sdk._user import User
from determined.experimental._sdk._workspace import Workspace

__all__ = [
    "Checkpoint",
    "CheckpointOrderBy",
    "CheckpointSortBy",
    "CheckpointState",
    "CheckpointStateError",
    "CheckpointTrainingMetadata",
    "Determined",
    "DownloadFailed",
    "DownloadMode",
    "Experiment",
    "ExperimentOrderBy",
    "ExperimentSortBy",
    "ExperimentState",
    "LogLevel",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "Oauth2ScimClient",
    "OrderBy",
    "Project",
    "ResourcePool",
    "ResourcePoolBindingError",
    "TrainingMetrics",
    "Trial",
    "TrialMetrics",
    "TrialOrderBy",
    "TrialSortBy",
    "TrialState",
    "User",
    "ValidationMetrics",
    "Workspace",
    "create_experiment",
    "create_model",
    "create_user",
    "add_oauth_client",
    "create_workspace",
    "delete_workspace",
    "get_checkpoint",
    "get_experiment",
    "get_model",
    "get_model_by_id",
    "get_model_labels",
    "get_models",
    "get_session_username",
    "get_trial",
    "get_user_by_id",
    "get_user_by_name",
    "get_workspace",
    "iter_trials_metrics",
    "list_experiments",
    "list_models",
    "list_oauth_clients",
    "list_users",
    "list_workspaces",
    "login",
    "logout",
    "remove_oauth_client",
    "stream_trials_metrics",
    "stream_trials_training_metrics",
    "stream_trials_validation_metrics",
    "whoami",
]

logger = logging.getLogger("determined.client")

_determined: Determined | None = None

F = TypeVar("F", bound=Callable[..., Any])


def _require_singleton(fn: F) -> F:
    """Make the module's ``Determined`` (from the environment and the token store) before the
    first call that needs one."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        global _determined
        if _determined is None:
            _determined = Determined()
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _det() -> Determined:
    assert _determined is not None, "set by _require_singleton"
    return _determined


def login(
    master: str | None = None,
    user: str | None = None,
    password: str | None = None,
    cert_path: str | None = None,
    cert_name: str | None = None,
    noverify: bool = False,
) -> None:
    """Set up the module's session (see :class:`Determined` for the defaults). Call it once,
    before any other function of this module; without it the first call logs in with the
    defaults.

    Raises:
        ValueError: the module already has a session (make ``Determined`` objects for more).
    """
    global _determined
    if _determined is not None:
        raise ValueError(
            "client.login() may be called once, before any other client function; to talk to "
            "several masters or as several users, make client.Determined(...) objects"
        )
    _determined = Determined(master, user, password, cert_path, cert_name, noverify)


def logout() -> None:
    """End the module's session (a no-op, with a warning, when there is none)."""
    global _determined
    if _determined is None:
        logger.warning(
            "client.logout(): the client module has no session; to log out the active user "
            "of the CLI, call client.Determined().logout()"
        )
        return
    _determined.logout()
    _determined = None


@_require_singleton
def create_experiment(
    config: str | pathlib.Path | dict[str, Any],
    model_dir: str | pathlib.Path | None = None,
    includes: Iterable[str | pathlib.Path] | None = None,
    project_id: int | None = None,
    template: str | None = None,
    *,
    parent_id: int | None = None,
    activate: bool = True,
) -> Experiment:
    """See :meth:`Determined.create_experiment`."""
    return _det().create_experiment(
        config,
        model_dir,
        includes,
        project_id,
        template,
        parent_id=parent_id,
        activate=activate,
    )


@_require_singleton
def get_experiment(experiment_id: int) -> Experiment:
    return _det().get_experiment(experiment_id)


@_require_singleton
def list_experiments(
    sort_by: ExperimentSortBy | None = None,
    order_by: OrderBy | None = None,
    experiment_ids: list[int] | None = None,
    labels: list[str] | None = None,
    users: list[str] | None = None,
    states: list[ExperimentState] | None = None,
    name: str | None = None,
    project_id: int | None = None,
) -> list[Experiment]:
    """See :meth:`Determined.list_experiments`."""
    return _det().list_experiments(
        sort_by=sort_by,
        order_by=order_by,
        experiment_ids=experiment_ids,
        labels=labels,
        users=users,
        states=states,
        name=name,
        project_id=project_id,
    )


@_require_singleton
def create_user(
    username: str, admin: bool, password: str | None = None, remote: bool = False
) -> User:
    return _det().create_user(username, admin, password, remote)


@_require_singleton
def get_user_by_id(user_id: int) -> User:
    return _det().get_user_by_id(user_id)


@_require_singleton
def get_user_by_name(user_name: str) -> User:
    return _det().get_user_by_name(user_name)


@_require_singleton
def get_session_username() -> str:
    return _det().get_session_username()


@_require_singleton
def whoami() -> User:
    return _det().whoami()


@_require_singleton
def list_users(active: bool | None = None) -> list[User]:
    return _det().list_users(active=active)


@_require_singleton
def get_trial(trial_id: int) -> Trial:
    return _det().get_trial(trial_id)


@_require_singleton
def get_checkpoint(uuid: str) -> Checkpoint:
    return _det().get_checkpoint(uuid)


@_require_singleton
def get_workspace(name: str) -> Workspace:
    return _det().get_workspace(name)


@_require_singleton
def list_workspaces() -> list[Workspace]:
    return _det().list_workspaces()


@_require_singleton
def create_workspace(name: str) -> Workspace:
    return _det().create_workspace(name)


@_require_singleton
def delete_workspace(name: str) -> None:
    return _det().delete_workspace(name)


@_require_singleton
def create_model(
    name: str, description: str | None = "", metadata: dict[str, Any] | None = None
) -> Model:
    """See :meth:`Determined.create_model` (which also takes labels and a workspace)."""
    return _det().create_model(name, description, metadata)


@_require_singleton
def get_model(identifier: str | int) -> Model:
    return _det().get_model(identifier)


@_require_singleton
def get_model_by_id(model_id: int) -> Model:
    """Deprecated in 0.37: ``get_model(model_id)``."""
    return _det().get_model(model_id)


@_require_singleton
def get_models(
    sort_by: ModelSortBy = ModelSortBy.NAME,
    order_by: OrderBy = OrderBy.ASCENDING,
    name: str = "",
    description: str = "",
) -> list[Model]:
    """Deprecated in 0.37: :func:`list_models`."""
    return _det().get_models(sort_by, order_by, name, description)


@_require_singleton
def list_models(
    sort_by: ModelSortBy = ModelSortBy.NAME,
    order_by: OrderBy = OrderBy.ASCENDING,
    name: str | None = None,
    description: str | None = None,
    model_id: int | None = None,
    workspace_names: list[str] | None = None,
    workspace_ids: list[int] | None = None,
) -> list[Model]:
    return _det().list_models(
        sort_by, order_by, name, description, model_id, workspace_names, workspace_ids
    )


@_require_singleton
def get_model_labels() -> list[str]:
    return _det().get_model_labels()


@_require_singleton
def stream_trials_metrics(trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
    """Deprecated in 0.37: :func:`iter_trials_metrics`."""
    return _det().iter_trials_metrics(trial_ids, group)


@_require_singleton
def iter_trials_metrics(trial_ids: list[int], group: str) -> Iterator[TrialMetrics]:
    """The metric reports of ``group`` of the trials, oldest first, waiting for new ones
    until every trial has ended."""
    return _det().iter_trials_metrics(trial_ids, group)


@_require_singleton
def stream_trials_training_metrics(trial_ids: list[int]) -> Iterator[TrainingMetrics]:
    """Deprecated in 0.37: ``iter_trials_metrics(trial_ids, "training")``."""
    return _det().stream_trials_training_metrics(trial_ids)


@_require_singleton
def stream_trials_validation_metrics(trial_ids: list[int]) -> Iterator[ValidationMetrics]:
    """Deprecated in 0.37: ``iter_trials_metrics(trial_ids, "validation")``."""
    return _det().stream_trials_validation_metrics(trial_ids)


# OAuth clients are 0.37's enterprise edition: no login is needed to learn that.


def list_oauth_clients() -> list[Oauth2ScimClient]:
    """Raises determined.errors.EnterpriseOnlyError (an enterprise-edition feature)."""
    raise _oauth.refuse("list OAuth clients")


def add_oauth_client(domain: str, name: str) -> Oauth2ScimClient:
    """Raises determined.errors.EnterpriseOnlyError (an enterprise-edition feature)."""
    raise _oauth.refuse(f"add OAuth client {name!r}")


def remove_oauth_client(client_id: str) -> None:
    """Raises determined.errors.EnterpriseOnlyError (an enterprise-edition feature)."""
    raise _oauth.refuse(f"remove OAuth client {client_id!r}")
