"""``core.init()`` and ``core.Context``: the Core API's entry point.

``init()`` picks the backend once: with cluster info (a trial started by a master) every
sub-context talks to the master; without it they log, write TensorBoard files and checkpoints
locally, and preempt on SIGTERM/SIGINT. Nothing built on the Core API needs to know which.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import logging
import pathlib
import signal
import sys
import threading
import time
import types
import uuid
from typing import Any, Literal

import determined as det
from determined import _user_error, tensorboard
from determined.common import _paths, storage
from determined.common.api import Session, _routes
from determined.core._checkpoint import (
    CheckpointContext,
    ClusterCheckpointReporter,
    LocalCheckpointReporter,
)
from determined.core._distributed import DistributedContext
from determined.core._experimental import ExperimentalCoreContext
from determined.core._metrics import MetricsShipper
from determined.core._preempt import (
    PreemptContext,
    PreemptMode,
    _MasterAndSignal,
    _MasterWatcher,
    _NeverPreempted,
    _SignalWatcher,
    _Watcher,
    in_batch_job,
)
from determined.core._profiler import DummyProfilerContext, ProfilerContext
from determined.core._searcher import (
    DummySearcherContext,
    SearcherContext,
    _has_searcher_length,
    _MasterOps,
    _parse_searcher_units,
)
from determined.core._tensorboard_mode import TensorboardMode
from determined.core._train import (
    DummyTrainContext,
    EarlyExitReason,
    TrainContext,
    _LocalTrainBackend,
    _MasterTrainBackend,
)

# Tries per request of a task's session (see init's comment).
TASK_ATTEMPTS = 8

logger = logging.getLogger("determined.core")

StorageArg = str | dict[str, Any] | None

# core.Context.alert()'s levels as the wire's v1LogLevel; anything else is INFO, as in 0.37.
_ALERT_LEVELS = {
    "info": "LOG_LEVEL_INFO",
    "warn": "LOG_LEVEL_WARNING",
    "debug": "LOG_LEVEL_DEBUG",
    "error": "LOG_LEVEL_ERROR",
}


class Context:
    """The Core API: ``.checkpoint``, ``.distributed``, ``.preempt``, ``.searcher``, ``.train``,
    ``.profiler``, ``.experimental`` and ``.info`` (None without a master).

    Build it with ``core.init()`` and use it as a context manager: ``__enter__`` starts the
    preemption watcher and the metric shipper, ``close()`` stops everything in order and raises
    any metric report that failed to reach the master.
    """

    def __init__(
        self,
        *,
        checkpoint: CheckpointContext,
        distributed: DistributedContext,
        preempt: PreemptContext,
        train: TrainContext,
        searcher: SearcherContext,
        profiler: ProfilerContext | DummyProfilerContext,
        experimental: ExperimentalCoreContext,
        info: det.ClusterInfo | None = None,
        _session: Session | None = None,
        _tensorboard_manager: tensorboard.TensorboardManager | None = None,
        _tensorboard_writer: tensorboard.BatchMetricWriter | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.distributed = distributed
        self.preempt = preempt
        self.train = train
        self.searcher = searcher
        self.profiler = profiler
        self.experimental = experimental
        self.info = info
        self._session = _session
        self._tensorboard_manager = _tensorboard_manager
        self._tensorboard_writer = _tensorboard_writer

    def start(self) -> None:
        """Start background work. A second call raises RuntimeError."""
        self.preempt.start()
        self.train._start()
        if self._tensorboard_manager is not None:
            self._tensorboard_manager.start()

    def __enter__(self) -> Context:
        self.start()
        return self

    def alert(
        self,
        title: str | None = None,
        description: str | None = None,
        level: Literal["warn", "info", "debug", "error"] | None = "info",
    ) -> None:
        """Raise an alert about this trial: the master records it, and the web UI's experiment
        and trial pages and ``det e describe`` show it (0.37 sends it to the webhooks of the
        custom trigger). Any rank may call it; each call is one alert.

        Without a master it is only logged. ``level`` is ``"info"`` (also for None or any other
        string, as in 0.37), ``"warn"``, ``"debug"`` or ``"error"``.

        Raises:
            ValueError: on a cluster, in a task that is not a trial.
        """
        wire_level = _ALERT_LEVELS.get(level or "info", "LOG_LEVEL_INFO")
        if self._session is None or self.info is None:
            logger.info(f"alert ({wire_level}): {title or ''}: {description or ''}")
            return
        if self.info.task_type != "TRIAL":
            raise ValueError(f"alert() only works in a trial; this task is a {self.info.task_type}")
        body = {
            "data": {"title": title or "", "description": description or "", "level": wire_level},
            "experimentId": self.info.trial.experiment_id,
            "trialId": self.info.trial.trial_id,
        }
        _routes.post_custom_webhook(self._session, body)

    def close(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: types.TracebackType | None = None,
    ) -> None:
        """Stop in order: a background checkpoint (waited for; its failure re-raised),
        preemption, sockets, metrics (drained; errors re-raised), profiler, TensorBoard (final
        sync), HTTP session. The exception arguments (0.37's signature, as
        ``__exit__`` passes them) change nothing: the master learns of a failure from the
        process's exit code."""
        try:
            try:
                self.checkpoint._close()  # an outstanding background checkpoint finishes first
            finally:
                self.preempt.close()
                self.distributed.close()
                self.train._close()
        finally:
            self.profiler._close()
            if self._tensorboard_writer is not None:
                self._tensorboard_writer.close()
            if self._tensorboard_manager is not None:
                self._tensorboard_manager.close()
            if self._session is not None:
                self._session.close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: types.TracebackType | None,
    ) -> None:
        if self.info is not None and exc_val is not None and _is_failure(exc_val):
            # ERROR: the level the master records; `det` shows this line first, as the
            # trial's cause, above the traceback and any launcher's report.
            print(f"ERROR: {_user_error.describe(exc_val)}", file=sys.stderr, flush=True)
        self.close(exc_type, exc_val, exc_tb)
        if isinstance(exc_val, det.InvalidHP):
            self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            logger.info("InvalidHP raised: reported an early exit; exiting with status 0")
            sys.exit(0)


def _is_failure(exc: BaseException | None) -> bool:
    """An exception that fails the trial (not an InvalidHP early exit, not an exit or ^C)."""
    return isinstance(exc, Exception) and not isinstance(exc, det.InvalidHP)


def _dump_stacks_on_sigusr1() -> None:
    # `kill -USR1 <pid>` prints every thread's stack: the first tool for a hung job.
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        try:
            faulthandler.register(signal.SIGUSR1, all_threads=True, chain=True)
        except (AttributeError, ValueError):
            pass  # stderr without a file descriptor (Jupyter, captured output): no dumps


def _single_process() -> DistributedContext:
    return DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )


def _local_tensorboard_dir() -> pathlib.Path:
    name = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
    return _paths.default_tensorboard_dir() / name


def _local_init(
    distributed: DistributedContext | None,
    checkpoint_storage: StorageArg,
    preempt_mode: PreemptMode,
    tensorboard_mode: TensorboardMode,
) -> Context:
    dist = distributed or _single_process()
    manager = storage.from_init_arg(checkpoint_storage, _paths.default_checkpoint_dir())
    writer = tb_path = None
    if tensorboard_mode == TensorboardMode.AUTO and dist.get_rank() == 0:
        tb_path = _local_tensorboard_dir()
        writer = tensorboard.get_metric_writer(tb_path)
        logger.info(f"TensorBoard files go to {tb_path}")
    train = TrainContext(
        _LocalTrainBackend(),
        rank=dist.get_rank(),
        tensorboard_mode=tensorboard_mode,
        tensorboard_writer=writer,
        tensorboard_path=tb_path,
    )
    return Context(
        checkpoint=CheckpointContext(dist, manager, LocalCheckpointReporter()),
        distributed=dist,
        preempt=PreemptContext(_SignalWatcher, dist, preempt_mode),
        train=train,
        searcher=DummySearcherContext(dist),
        profiler=DummyProfilerContext(),
        experimental=ExperimentalCoreContext(),
        _tensorboard_writer=writer,
    )


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: StorageArg = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> Context:
    """Build the Core API for this process.

    On a cluster (``det.get_cluster_info()`` is not None) every part talks to the master; without
    one, metrics are logged (and written as TensorBoard files in AUTO mode), checkpoints go to
    ``checkpoint_storage`` (default ``<data dir>/checkpoints``), the searcher yields one operation
    and SIGTERM/SIGINT request preemption. Use the result as a context manager.

    Args:
        distributed: required when the task has more than one slot or container; e.g.
            ``core.DistributedContext.from_torch_distributed()``.
        checkpoint_storage: a path, a ``file:``/``s3://``/``gs://`` URL, or a storage dict;
            on a cluster it replaces the experiment's ``checkpoint_storage``.
        preempt_mode: which ranks ask for preemption (:class:`PreemptMode`).
        tensorboard_mode: AUTO writes metrics to TensorBoard files itself; MANUAL leaves that to
            user code (``train.upload_tensorboard_files()``).
    """
    _dump_stacks_on_sigusr1()
    info = det.get_cluster_info()
    if info is None:
        return _local_init(
            distributed,
            checkpoint_storage,
            PreemptMode(preempt_mode),
            TensorboardMode(tensorboard_mode),
        )
    return _cluster_init(
        info,
        distributed,
        checkpoint_storage,
        PreemptMode(preempt_mode),
        TensorboardMode(tensorboard_mode),
    )


# Where the reference's containers mount shared_fs's host_path; trials of our own master run on
# the host and use host_path itself.
_SHARED_FS_MOUNT = "/determined_shared_fs"


@dataclasses.dataclass
class MasterReporting:
    """What a trial that reports to a master needs: its metrics shipper, train context,
    checkpoint reporter and TensorBoard manager/writer (shared by ``core.init()`` on a
    cluster and ``core_v2``'s unmanaged runs)."""

    shipper: MetricsShipper
    train: TrainContext
    reporter: ClusterCheckpointReporter
    tb_manager: tensorboard.TensorboardManager
    writer: Any


def master_reporting(
    session: Session,
    info: Any,
    dist: DistributedContext,
    manager: storage.StorageManager,
    storage_section: dict[str, Any],
    storage_id: Any,
    tensorboard_mode: TensorboardMode,
) -> MasterReporting:
    """Metrics and checkpoints of ``info.trial`` go to the master; TensorBoard files are
    written (chief) and synced after each checkpoint in AUTO mode."""
    trial = info.trial
    auto = tensorboard_mode == TensorboardMode.AUTO
    tb_manager = tensorboard.TensorboardManager(
        tensorboard.get_base_path(storage_section),
        tensorboard.get_sync_path(info.cluster_id, trial.experiment_id, trial.trial_id),
        _tensorboard_storage(manager),
        sync_on_close=auto,
    )
    writer = None
    if auto and dist.get_rank() == 0:
        writer = tensorboard.get_metric_writer(tb_manager.base_path)
    shipper = MetricsShipper(session, trial.trial_id, trial._trial_run_id)
    train = TrainContext(
        _MasterTrainBackend(session, shipper, trial.trial_id, trial.experiment_id),
        rank=dist.get_rank(),
        tensorboard_mode=tensorboard_mode,
        tensorboard_manager=tb_manager,
        tensorboard_writer=writer,
    )
    reporter = ClusterCheckpointReporter(
        session,
        info.task_id,
        info.allocation_id,
        storage_id,
        after_report=tb_manager.sync if auto else None,
    )
    return MasterReporting(shipper, train, reporter, tb_manager, writer)


def _cluster_storage(arg: StorageArg, config: dict[str, Any]) -> storage.StorageManager:
    if arg is not None:
        return storage.from_init_arg(arg, _paths.default_checkpoint_dir())
    mount = _SHARED_FS_MOUNT if pathlib.Path(_SHARED_FS_MOUNT).is_dir() else None
    return storage.build(config["checkpoint_storage"], container_path=mount)


def _tensorboard_storage(manager: storage.StorageManager) -> tensorboard.TensorboardStorage:
    if isinstance(manager, storage.DirectoryStorageManager):
        return tensorboard.DirectoryTensorboardStorage(manager.base_path)
    if isinstance(manager, storage.CloudStorageManager):
        return manager
    raise TypeError(f"no TensorBoard storage for {manager!r}")


def _check_distributed(info: det.ClusterInfo, distributed: DistributedContext | None) -> None:
    if distributed is None and (len(info.slot_ids) > 1 or len(info.container_addrs) > 1):
        raise ValueError(
            f"this task has {len(info.slot_ids)} slots on {len(info.container_addrs)} "
            "container(s): pass distributed=core.DistributedContext.from_torch_distributed() "
            "(or another DistributedContext) to core.init()"
        )


def _cluster_init(
    info: det.ClusterInfo,
    distributed: DistributedContext | None,
    checkpoint_storage: StorageArg,
    preempt_mode: PreemptMode,
    tensorboard_mode: TensorboardMode,
) -> Context:
    _check_distributed(info, distributed)
    dist = distributed or _single_process()
    cert: str | bool | None = info.master_cert_file
    if info.master_cert_name == "noverify":
        cert = False
    # A task rides out a master restart (kill -9, then migrations and Slurm adoption: over
    # 10 s on a loaded machine): 8 tries back off 0.5 s, 1 s, ... to 10 s, ~35 s in all.
    session = Session(info.master_url, info.session_token, cert=cert, max_attempts=TASK_ATTEMPTS)
    if info.task_type != "TRIAL":
        return Context(
            checkpoint=CheckpointContext(
                dist,
                storage.from_init_arg(checkpoint_storage, _paths.default_checkpoint_dir()),
                LocalCheckpointReporter(),
            ),
            distributed=dist,
            preempt=PreemptContext(_NeverPreempted, dist, preempt_mode),
            train=DummyTrainContext(),
            searcher=DummySearcherContext(dist),
            profiler=DummyProfilerContext(),
            experimental=ExperimentalCoreContext(session),
            info=info,
            _session=session,
        )

    trial = info.trial
    config = trial._config
    manager = _cluster_storage(checkpoint_storage, config)
    storage_id = _routes.start_run(session, trial.trial_id, config.get("checkpoint_storage"))

    reporting = master_reporting(
        session,
        info,
        dist,
        manager,
        config.get("checkpoint_storage") or {},
        storage_id,
        tensorboard_mode,
    )
    shipper, train, reporter = reporting.shipper, reporting.train, reporting.reporter
    tb_manager, writer = reporting.tb_manager, reporting.writer

    def watcher() -> _Watcher:
        master = _MasterWatcher(session, info.allocation_id)
        return _MasterAndSignal(master) if in_batch_job() else master

    def report_profile(group: str, metrics: dict[str, Any], at: datetime.datetime) -> None:
        shipper.report(group, None, metrics, None, at)

    return Context(
        checkpoint=CheckpointContext(dist, manager, reporter),
        distributed=dist,
        preempt=PreemptContext(watcher, dist, preempt_mode, defer_sigterm=in_batch_job()),
        train=train,
        searcher=SearcherContext(
            _MasterOps(session, trial.trial_id, info.allocation_id),
            dist,
            _parse_searcher_units(config),
            has_length=_has_searcher_length(config),
        ),
        profiler=ProfilerContext(info.agent_id, report_profile, dist),
        experimental=ExperimentalCoreContext(session, trial.trial_id),
        info=info,
        _session=session,
        _tensorboard_manager=tb_manager,
        _tensorboard_writer=writer,
    )
