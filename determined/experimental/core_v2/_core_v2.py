"""``core_v2.init()`` and friends: the Core API as module-level singletons, for a plain
``python train.py`` on any machine (0.37's "unmanaged" experiments).

Where it runs decides the backend, once:

- in a trial this master launched: ``core.init()`` (the ``config`` arguments are ignored);
- with a master (``client=``, or ``$DET_MASTER``): an unmanaged experiment and trial on it,
  reported to with the user's login (``det user login``'s token, or ``$DET_USER``/``$DET_PASS``);
- otherwise: the local Core API, with a one-line notice.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import uuid
from typing import Any

import determined as det
from determined import core, errors
from determined.common.api import Session, _auth, canonicalize_master_url
from determined.core._distributed import DistributedContext
from determined.core._preempt import PreemptMode
from determined.core._tensorboard_mode import TensorboardMode
from determined.experimental.core_v2 import _config, _context, _unmanaged
from determined.experimental.core_v2._config import Config, DefaultConfig, UnmanagedConfig

logger = logging.getLogger("determined.core")

_state: dict[str, Any] = {"context": None, "master": None, "atexit": False}

StorageArg = str | dict[str, Any] | None


def _client_session(client: Any) -> Session:
    """The session of a ``Determined`` client object (``client._session``)."""
    sess = getattr(client, "_session", None)
    if not isinstance(sess, Session):
        raise TypeError(
            "client must be a determined.experimental.Determined (with a logged-in session), "
            f"not {type(client).__name__}"
        )
    return sess


def _login(master: str) -> Session:
    """A session as ``det`` would open it (``common.api._auth.login_with_cache``)."""
    try:
        sess, _ = _auth.login_with_cache(canonicalize_master_url(master), None)
    except (ValueError, _auth.LoginError) as e:  # a bad URL, or no login
        raise errors.Unauthenticated(f"core_v2 cannot log in to {master}: {e}") from e
    return sess


def _experiment_config(config: Config, storage: StorageArg) -> dict[str, Any]:
    section = _context.storage_config(storage or config.checkpoint_storage)
    raw: dict[str, Any] = {
        "name": config.name or f"unmanaged-{uuid.uuid4().hex[:8]}",
        "data": config.data,
        "description": config.description,
        "labels": config.labels,
        "searcher": config.searcher
        or {"name": "single", "metric": "unmanaged", "max_length": 100000000},
        "workspace": config.workspace,
        "project": config.project,
        "checkpoint_storage": section,
    }
    return {k: v for k, v in raw.items() if v is not None}


def init_context(
    *,
    config: Config | None = None,
    defaults: DefaultConfig | None = None,
    unmanaged: UnmanagedConfig | None = None,
    client: Any = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: StorageArg = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> core.Context:
    """The Core API for this process as a ``core.Context`` (use it as a context manager); see
    :func:`init` for the arguments and the backend chosen."""
    return _build(
        config=config,
        defaults=defaults,
        unmanaged=unmanaged,
        client=client,
        distributed=distributed,
        checkpoint_storage=checkpoint_storage,
        preempt_mode=preempt_mode,
        tensorboard_mode=tensorboard_mode,
    )


def _build(
    *,
    config: Config | None,
    defaults: Config | None,
    unmanaged: Config | None,
    client: Any,
    distributed: DistributedContext | None,
    checkpoint_storage: StorageArg,
    preempt_mode: PreemptMode,
    tensorboard_mode: TensorboardMode,
) -> core.Context:
    info = det.get_cluster_info()
    if info is not None and info.task_type == "TRIAL":
        # A trial this master launched: the experiment's config rules, as in 0.37.
        managed = core.init(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage,
            preempt_mode=preempt_mode,
            tensorboard_mode=tensorboard_mode,
        )
        return managed
    merged = _config.merge(config, defaults, unmanaged) or Config()
    if client is not None:
        session = _client_session(client)
    elif os.environ.get("DET_MASTER"):
        session = _login(os.environ["DET_MASTER"])
    else:
        print(
            "core_v2: no master (DET_MASTER is unset and no client was given): using the local "
            "Core API (metrics logged, checkpoints in a local directory)",
            file=sys.stderr,
        )
        local = core.init(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage or merged.checkpoint_storage,
            preempt_mode=preempt_mode,
            tensorboard_mode=tensorboard_mode,
        )
        return local
    info = _unmanaged.register(
        session,
        _experiment_config(merged, checkpoint_storage),
        hparams=merged.hparams,
        external_experiment_id=merged.external_experiment_id,
        external_trial_id=merged.external_trial_id,
        distributed=distributed,
    )
    return _context.unmanaged_context(
        info,
        session,
        distributed=distributed,
        preempt_mode=PreemptMode(preempt_mode),
        tensorboard_mode=TensorboardMode(tensorboard_mode),
    )


def init(
    *,
    config: Config | None = None,
    defaults: DefaultConfig | None = None,
    unmanaged: UnmanagedConfig | None = None,
    client: Any = None,
    distributed: DistributedContext | None = None,
    checkpoint_storage: StorageArg = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> None:
    """Start the Core API and set ``core_v2.train``, ``.checkpoint``, ``.distributed``,
    ``.preempt``, ``.searcher`` and ``.info``; :func:`close` (also run at exit) ends it.

    With a master (``client``, or ``$DET_MASTER``) and outside a trial the master launched,
    an unmanaged experiment and trial are registered (or found again by
    ``external_experiment_id``/``external_trial_id``); ``core_v2.info.latest_checkpoint`` is
    the checkpoint to resume from. Without a master the local Core API is used.

    Args:
        config: the experiment's name, hparams, labels, description, checkpoint_storage,
            searcher and external ids (:class:`Config`).
        defaults, unmanaged: 0.37's deprecated halves of ``config``.
        client: a ``determined.experimental.Determined`` to use instead of ``$DET_MASTER``.
        distributed, checkpoint_storage, preempt_mode, tensorboard_mode: as ``core.init()``.
    """
    if _state["context"] is not None:
        close()
    context = _build(
        config=config,
        defaults=defaults,
        unmanaged=unmanaged,
        client=client,
        distributed=distributed,
        checkpoint_storage=checkpoint_storage,
        preempt_mode=preempt_mode,
        tensorboard_mode=tensorboard_mode,
    )
    context.start()
    _state.update(context=context, master=_master_of(context, client))
    _set_globals(context)
    if not _state["atexit"]:
        atexit.register(close)
        _state["atexit"] = True


def _master_of(context: core.Context, client: Any) -> str | None:
    if context.info is None:
        return None
    return str(getattr(client, "_master", None) or context.info.master_url)


def _set_globals(context: core.Context | None) -> None:
    from determined.experimental import core_v2

    core_v2.train = None if context is None else context.train
    core_v2.checkpoint = None if context is None else context.checkpoint
    core_v2.distributed = None if context is None else context.distributed
    core_v2.preempt = None if context is None else context.preempt
    core_v2.searcher = None if context is None else context.searcher
    core_v2.info = None if context is None else context.info


def close() -> None:
    """End what :func:`init` started: flush metrics, wait for checkpoints, and tell the master
    the unmanaged trial completed (or, after an uncaught exception or a non-zero
    ``sys.exit``, that it errored). A second call does nothing."""
    context: core.Context | None = _state["context"]
    _state.update(context=None)
    if context is None:
        return
    try:
        context.close()
    finally:
        _set_globals(None)


def url_reverse_webui_exp_view() -> str:
    """The web UI's page of this process's experiment, ``<master>/experiments/<id>``.

    Raises:
        RuntimeError: before :func:`init`, or without a master.
    """
    context: core.Context | None = _state["context"]
    if context is None or context.info is None or context.info._trial_info is None:
        raise RuntimeError(
            "url_reverse_webui_exp_view() needs core_v2.init() with a master (DET_MASTER or "
            "client=) first"
        )
    return f"{str(_state['master']).rstrip('/')}/experiments/{context.info.trial.experiment_id}"
