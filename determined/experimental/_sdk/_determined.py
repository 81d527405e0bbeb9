"""``Determined``: a logged-in connection to one master, the root of every SDK object."""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Iterable, Iterator
from typing import Any

import yaml

from determined.common import _context
from determined.common.api import Session, _auth, _routes, canonicalize_master_url
from determined.experimental._sdk import (
    _checkpoint,
    _experiment,
    _find,
    _metrics,
    _model,
    _oauth,
    _paging,
    _user,
    _workspace,
)
from determined.experimental._sdk._enums import (
    ExperimentSortBy,
    ExperimentState,
    ModelSortBy,
    OrderBy,
)

logger = logging.getLogger("determined.client")


def default_master() -> str:
    """``$DET_MASTER``, else ``$DET_MASTER_ADDR`` (0.37 reads both), else localhost:8080."""
    return os.environ.get("DET_MASTER") or os.environ.get("DET_MASTER_ADDR") or "localhost:8080"


def _config_text(config: str | pathlib.Path | dict[str, Any]) -> str:
    if isinstance(config, dict):
        return str(yaml.safe_dump(config, sort_keys=False))
    if isinstance(config, (str, pathlib.Path)):
        text = pathlib.Path(config).read_text()
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"experiment config {str(config)!r} is not valid YAML: {e}") from e
        return text
    raise ValueError(f"config must be a dict or the path of a YAML file, not {type(config)}")


class Determined:
    """A session with one master, logged in as one user.

    ``master`` defaults to ``$DET_MASTER``; ``user`` is chosen as ``det`` chooses it
    (the master's active user in the token store that ``det user login`` writes, else
    ``$DET_USER`` with ``$DET_PASS``, else ``determined``; in a task, its owner). Without a
    ``password`` a cached token of that user is reused, as the CLI does; with one the user logs
    in and the token is cached for the CLI too.

    Raises:
        determined.common.api._auth.LoginError: no usable cached token and no password, or a
            wrong password.
        ValueError: ``master`` is not a master URL.
    """

    def __init__(
        self,
        master: str | None = None,
        user: str | None = None,
        password: str | None = None,
        cert_path: str | None = None,
        cert_name: str | None = None,
        noverify: bool = False,
    ) -> None:
        self._master = canonicalize_master_url(master or default_master())
        cert: str | bool | None = False if noverify else cert_path
        self._cert = cert
        self._session: Session
        self._session, self._username = _auth.login_with_cache(
            self._master, user, password, cert=cert
        )

    @classmethod
    def _from_session(cls, session: Session, username: str = "") -> Determined:
        """A ``Determined`` over a session someone already holds (the CLI's)."""
        det = cls.__new__(cls)
        det._master = session.master_url
        det._cert = None
        det._session = session
        det._username = username
        return det

    # Users.

    def create_user(
        self, username: str, admin: bool, password: str | None = None, remote: bool = False
    ) -> _user.User:
        """Create a user; the password must meet 0.37's complexity rules.

        Raises:
            ValueError: a weak password, or ``remote`` (this master has no single sign-on).
        """
        if remote:
            raise ValueError("remote users need single sign-on, which this master has not")
        _user.check_password_complexity(password)
        body = {
            "user": {"username": username, "admin": admin, "active": True, "remote": False},
            "password": _auth.hash_password(password or ""),
            "isHashed": True,
        }
        return _user.User._from_json(_routes.create_user(self._session, body), self._session)

    def get_user_by_id(self, user_id: int) -> _user.User:
        return _user.User._from_json(_routes.get_user(self._session, user_id), self._session)

    def get_user_by_name(self, user_name: str) -> _user.User:
        body = _routes.get_user_by_name(self._session, user_name)
        return _user.User._from_json(body, self._session)

    def whoami(self) -> _user.User:
        return _user.User._from_json(_routes.get_me(self._session), self._session)

    def get_session_username(self) -> str:
        if not self._username:
            self._username = str(self.whoami().username)
        return self._username

    def logout(self) -> None:
        """End this session on the master and forget its cached token."""
        _auth.logout(self._master, self.get_session_username(), cert=self._cert)

    def list_users(self, active: bool | None = None) -> list[_user.User]:
        """Every user; ``active`` True/False keeps only active/inactive ones."""
        params: dict[str, Any] = {} if active is None else {"active": str(active).lower()}

        def page(offset: int) -> dict[str, Any]:
            return _routes.list_users(self._session, {**params, "offset": offset})

        found = _paging.read_paginated(page, "users")
        return [
            _user.User._from_json(u, self._session)
            for u in found
            if active is None or bool(u.get("active", True)) == active
        ]

    # Experiments, trials, checkpoints.

    def create_experiment(
        self,
        config: str | pathlib.Path | dict[str, Any],
        model_dir: str | pathlib.Path | None = None,
        includes: Iterable[str | pathlib.Path] | None = None,
        project_id: int | None = None,
        template: str | None = None,
        *,
        parent_id: int | None = None,
        activate: bool = True,
    ) -> _experiment.Experiment:
        """Create (and by default start) an experiment from a config (a dict or a YAML file's
        path) and a model directory, plus ``includes`` (files or directories added at the top
        level). ``template`` names a config template (``det template``) the master lays the
        config over. ``parent_id`` names the experiment a redacted config was read from, so
        that its secrets are restored (a fork).

        Raises:
            ValueError: a config that is not a dict or a YAML file, a bad model directory.
            determined.errors.MasterNotFound: no template of that name.
        """
        text = _config_text(config)
        root = pathlib.Path(model_dir) if model_dir is not None else None
        files = _context.read_context(root, [pathlib.Path(i) for i in includes or []])
        body = {
            "activate": activate,
            "config": text,
            "modelDefinition": files,
            "parentId": parent_id,
            "projectId": project_id,
            "template": template,
            "validateOnly": False,
        }
        resp = _routes.create_experiment(self._session, body)
        for warning in resp.get("warnings") or []:
            logger.warning("%s", warning)
        return _experiment.Experiment._from_json(resp["experiment"], self._session)

    def get_experiment(self, experiment_id: int) -> _experiment.Experiment:
        return _experiment.Experiment._get(self._session, experiment_id)

    def list_experiments(
        self,
        sort_by: ExperimentSortBy | None = None,
        order_by: OrderBy | None = None,
        experiment_ids: list[int] | None = None,
        labels: list[str] | None = None,
        users: list[str] | None = None,
        states: list[ExperimentState] | None = None,
        name: str | None = None,
        project_id: int | None = None,
    ) -> list[_experiment.Experiment]:
        """Experiments matching every filter given, sorted as asked (default: by id)."""

        def page(offset: int) -> dict[str, Any]:
            return _routes.list_experiments(
                self._session,
                sort_by=sort_by.value if sort_by else None,
                order_by=order_by.value if order_by else None,
                labels=labels,
                experiment_ids=experiment_ids,
                users=users,
                states=[s.value for s in states] if states else None,
                name=name,
                project_id=project_id,
                offset=offset,
            )

        # The master filters and sorts (as 0.37's does); pages arrive in its order.
        found = _paging.read_paginated(page, "experiments")
        return [_experiment.Experiment._from_json(e, self._session) for e in found]

    def get_trial(self, trial_id: int) -> _experiment.Trial:
        return _experiment.Trial._from_json(
            _routes.get_trial(self._session, trial_id), self._session
        )

    def get_checkpoint(self, uuid: str) -> _checkpoint.Checkpoint:
        return _checkpoint.Checkpoint._get(self._session, uuid)

    def stream_trials_metrics(
        self, trial_ids: list[int], group: str
    ) -> Iterator[_metrics.TrialMetrics]:
        """Deprecated in 0.37: :meth:`iter_trials_metrics`."""
        return self.iter_trials_metrics(trial_ids, group)

    def iter_trials_metrics(
        self, trial_ids: list[int], group: str
    ) -> Iterator[_metrics.TrialMetrics]:
        """The metric reports of ``group`` of the trials, oldest first; the iterator waits for
        new reports until every trial has ended."""
        return _metrics.trials_metrics(self._session, trial_ids, group)

    def stream_trials_training_metrics(
        self, trial_ids: list[int]
    ) -> Iterator[_metrics.TrainingMetrics]:
        """Deprecated in 0.37: ``iter_trials_metrics(trial_ids, "training")``."""
        return _metrics.training_metrics(self._session, trial_ids)

    def stream_trials_validation_metrics(
        self, trial_ids: list[int]
    ) -> Iterator[_metrics.ValidationMetrics]:
        """Deprecated in 0.37: ``iter_trials_metrics(trial_ids, "validation")``."""
        return _metrics.validation_metrics(self._session, trial_ids)

    # Workspaces.

    def get_workspace(self, name: str) -> _workspace.Workspace:
        """Raises LookupError when no workspace has that name."""
        body = _find.find_workspace(self._session, name)
        return _workspace.Workspace._from_json(body, self._session)

    def list_workspaces(self) -> list[_workspace.Workspace]:
        def page(offset: int) -> dict[str, Any]:
            return _routes.list_workspaces(self._session, {"offset": offset})

        found = _paging.read_paginated(page, "workspaces")
        return [_workspace.Workspace._from_json(w, self._session) for w in found]

    def create_workspace(self, name: str) -> _workspace.Workspace:
        body = _routes.create_workspace(self._session, {"name": name})
        return _workspace.Workspace._from_json(body, self._session)

    def delete_workspace(self, name: str) -> None:
        """Raises LookupError when no workspace has that name."""
        ws = _find.find_workspace(self._session, name)
        _routes.delete_workspace(self._session, int(ws["id"]))

    # OAuth clients: enterprise edition only in 0.37.

    def list_oauth_clients(self) -> list[_oauth.Oauth2ScimClient]:
        """Raises determined.errors.EnterpriseOnlyError (an enterprise-edition feature)."""
        raise _oauth.refuse("list OAuth clients")

    def add_oauth_client(self, domain: str, name: str) -> _oauth.Oauth2ScimClient:
        """Raises determined.errors.EnterpriseOnlyError (an enterprise-edition feature)."""
        raise _oauth.refuse(f"add OAuth client {name!r}")

    def remove_oauth_client(self, client_id: str) -> None:
        """Raises determined.errors.EnterpriseOnlyError (an enterprise-edition feature)."""
        raise _oauth.refuse(f"remove OAuth client {client_id!r}")

    # The model registry.

    def create_model(
        self,
        name: str,
        description: str | None = "",
        metadata: dict[str, Any] | None = None,
        labels: list[str] | None = None,
        workspace_name: str | None = None,
    ) -> _model.Model:
        """Add a model to the registry (in ``workspace_name``, default: the default one)."""
        body = {
            "name": name,
            "description": description or "",
            "metadata": metadata or {},
            "labels": list(labels or []),
            "workspaceName": workspace_name,
        }
        return _model.Model._from_json(_routes.create_model(self._session, body), self._session)

    def get_model(self, identifier: str | int) -> _model.Model:
        """The model named ``identifier`` (a str) or with that id (an int)."""
        if isinstance(identifier, int):
            found = [m for m in self.list_models() if m.model_id == identifier]
            if not found:
                raise LookupError(f"no model has id {identifier}")
            return found[0]
        return _model.Model._from_json(_routes.get_model(self._session, identifier), self._session)

    def get_model_by_id(self, model_id: int) -> _model.Model:
        """Deprecated in 0.37: ``get_model(model_id)``."""
        return self.get_model(model_id)

    def get_models(
        self,
        sort_by: ModelSortBy = ModelSortBy.NAME,
        order_by: OrderBy = OrderBy.ASCENDING,
        name: str | None = None,
        description: str | None = None,
        model_id: int | None = None,
        workspace_names: list[str] | None = None,
        workspace_ids: list[int] | None = None,
    ) -> list[_model.Model]:
        """Deprecated in 0.37: :meth:`list_models`."""
        return self.list_models(
            sort_by,
            order_by,
            name or None,
            description or None,
            model_id,
            workspace_names,
            workspace_ids,
        )

    def list_models(
        self,
        sort_by: ModelSortBy = ModelSortBy.NAME,
        order_by: OrderBy = OrderBy.ASCENDING,
        name: str | None = None,
        description: str | None = None,
        model_id: int | None = None,
        workspace_names: list[str] | None = None,
        workspace_ids: list[int] | None = None,
    ) -> list[_model.Model]:
        """Models of the registry matching the filters given."""
        params: dict[str, Any] = {
            "sortBy": sort_by.value,
            "orderBy": order_by.value,
            "name": name,
            "description": description,
            "id": model_id,
            "workspaceNames": workspace_names,
            "workspaceIds": workspace_ids,
        }
        params = {k: v for k, v in params.items() if v is not None}

        def page(offset: int) -> dict[str, Any]:
            return _routes.list_models(self._session, {**params, "offset": offset})

        found = _paging.read_paginated(page, "models")
        return [_model.Model._from_json(m, self._session) for m in found]

    def get_model_labels(self) -> list[str]:
        """Every label of any model, most used first."""
        return _routes.get_model_labels(self._session)
