"""The Core API of an unmanaged trial: the cluster backends of ``core`` with the user's session
and no allocation. What an allocation would give is absent: nothing preempts the process, the
searcher hands out one operation of ``searcher.max_length`` locally, and no ports or slots are
assigned (docs/core_v2.md)."""

from __future__ import annotations

import os
import pathlib
import types
import urllib.parse
from typing import Any

import determined as det
from determined.common import _paths, storage
from determined.common.api import Session, _routes
from determined.core._checkpoint import CheckpointContext
from determined.core._context import Context, _single_process, master_reporting
from determined.core._distributed import DistributedContext
from determined.core._experimental import ExperimentalCoreContext
from determined.core._preempt import PreemptContext, PreemptMode, _NeverPreempted
from determined.core._profiler import DummyProfilerContext
from determined.core._searcher import DummySearcherContext
from determined.core._tensorboard_mode import TensorboardMode
from determined.experimental.core_v2._logs import LogShipper
from determined.experimental.core_v2._unmanaged import TrialState


class UnmanagedContext(Context):
    """``core.Context`` of an unmanaged trial: starting it also tells the master the trial
    runs and starts copying the output to its logs; closing it reports COMPLETED, or ERROR
    when it closes on an exception (``with`` block, or an uncaught one at exit)."""

    _trial_state: TrialState | None = None
    _log_shipper: LogShipper | None = None

    def start(self) -> None:
        super().start()
        if self._log_shipper is not None:
            self._log_shipper.start()
        if self._trial_state is not None:
            self._trial_state.start()

    def close(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: types.TracebackType | None = None,
    ) -> None:
        failure = exc_val if isinstance(exc_val, Exception) else None
        try:
            super().close(exc_type, exc_val, exc_tb)
        except BaseException as e:
            failure = failure or (e if isinstance(e, Exception) else None)
            raise
        finally:
            try:
                if self._trial_state is not None:
                    self._trial_state.close(failure)
            finally:
                if self._log_shipper is not None:
                    self._log_shipper.close()


def storage_config(arg: str | dict[str, Any] | None) -> dict[str, Any]:
    """A ``checkpoint_storage`` section for the experiment's config: a dict as given; a path
    (or ``file:`` URL) as shared_fs there; ``s3://b/p`` and ``gs://b/p`` as s3 and gcs; None
    as shared_fs in this machine's data dir (``<data dir>/checkpoints``).

    Raises:
        ValueError: a URL of another scheme, or one without a bucket.
    """
    if arg is None:
        return {"type": "shared_fs", "host_path": str(_paths.default_checkpoint_dir())}
    if isinstance(arg, dict):
        return dict(arg)
    # A plain path is taken as written (URL parsing would cut it at a ';' or '?').
    path = arg[len("file://") :] if arg.startswith("file://") else arg
    if "://" not in path and (path.startswith("/") or not arg.startswith("file://")):
        return {"type": "shared_fs", "host_path": os.path.abspath(path or os.getcwd())}
    parsed = urllib.parse.urlparse(arg)
    if parsed.scheme in ("s3", "gs") and parsed.netloc:
        kind = "s3" if parsed.scheme == "s3" else "gcs"
        section: dict[str, Any] = {"type": kind, "bucket": parsed.netloc}
        if parsed.path.strip("/"):
            section["prefix"] = parsed.path.strip("/")
        return section
    raise ValueError(
        f"checkpoint_storage {arg!r}: use a path, a file:///path URL, s3://bucket/prefix, "
        "gs://bucket/prefix or a checkpoint_storage dict"
    )


def _searcher_length(config: dict[str, Any]) -> int:
    length = (config.get("searcher") or {}).get("max_length")
    if isinstance(length, dict) and len(length) == 1:
        length = next(iter(length.values()))
    return int(length) if isinstance(length, int) and length > 0 else 1


def unmanaged_context(
    info: det.ClusterInfo,
    session: Session,
    *,
    distributed: DistributedContext | None,
    preempt_mode: PreemptMode,
    tensorboard_mode: TensorboardMode,
) -> Context:
    trial = info.trial
    config = trial._config
    dist = distributed or _single_process()
    section = config.get("checkpoint_storage") or storage_config(None)
    manager = storage.build(section)
    pathlib.Path(getattr(manager, "base_path", ".")).mkdir(parents=True, exist_ok=True)
    storage_id = _routes.start_run(session, trial.trial_id, section)
    reporting = master_reporting(
        session, info, dist, manager, section, storage_id, tensorboard_mode
    )
    train, reporter = reporting.train, reporting.reporter
    tb_manager, writer = reporting.tb_manager, reporting.writer
    context = UnmanagedContext(
        checkpoint=CheckpointContext(dist, manager, reporter),
        distributed=dist,
        preempt=PreemptContext(_NeverPreempted, dist, preempt_mode),
        train=train,
        searcher=DummySearcherContext(dist, _searcher_length(config)),
        profiler=DummyProfilerContext(),
        experimental=ExperimentalCoreContext(session, trial.trial_id),
        info=info,
        _session=session,
        _tensorboard_manager=tb_manager,
        _tensorboard_writer=writer,
    )
    # Their own session: the context closes its one before the final state and logs are sent.
    own = Session(session.master_url, _token_of(session), token_kind="user")
    if dist.get_rank() == 0:
        context._trial_state = TrialState(own, trial.trial_id)
    context._log_shipper = LogShipper(own, info.task_id, dist.get_rank())
    return context


def _token_of(session: Session) -> str | None:
    header = session._http.headers.get("Authorization", "")
    return str(header).partition(" ")[2] or None
