"""``det.TrialController``: the base of legacy training loops that consume a stream of
``determined.workload`` workloads (see ``determined.layers``) for a ``det.LegacyTrial``."""

from __future__ import annotations

import abc
import logging
import os
from typing import TYPE_CHECKING, Any

from determined._env_context import EnvContext

if TYPE_CHECKING:
    import determined as det
    from determined import workload

logger = logging.getLogger("determined")


class _DistributedBackend:
    """Which distributed launcher started this process, read from the environment variables
    the launch layers set."""

    HOROVOD = "USE_HOROVOD"
    DEEPSPEED = "USE_DEEPSPEED"
    TORCH = "USE_TORCH_DISTRIBUTED"

    def use_horovod(self) -> bool:
        return bool(os.environ.get(self.HOROVOD))

    def use_torch(self) -> bool:
        return bool(os.environ.get(self.TORCH))

    def use_deepspeed(self) -> bool:
        return bool(os.environ.get(self.DEEPSPEED))


class TrialController(metaclass=abc.ABCMeta):
    """A training loop for one framework's trial classes.

    The harness calls, in order: ``pre_execute_hook(env, distributed_backend)`` (class method,
    before any user code runs), builds the context and the trial, ``from_trial(trial_inst=,
    context=, env=)`` and ``run()``. ``workloads`` is None on a cluster; subclasses then build
    the stream with ``determined.layers.make_compatibility_workloads``.
    """

    def __init__(
        self,
        context: Any,
        env: EnvContext,
        workloads: workload.Stream | None = None,
    ) -> None:
        self.context = context
        self.env = env
        self.workloads = workloads

        backend = _DistributedBackend()
        self.use_horovod = backend.use_horovod()
        self.use_torch = backend.use_torch()

        self.scheduling_unit = env.experiment_config.scheduling_unit()
        self.profiling_enabled = env.experiment_config.profiling_enabled()
        self.is_chief = context.distributed.rank == 0

        if context.distributed.size > 1 and not self.is_chief:
            # Workers repeat the chief's messages; keep their logs quiet unless debugging.
            debug = env.experiment_config.debug_enabled()
            logging.getLogger().setLevel(logging.DEBUG if debug else logging.WARNING)

    @classmethod
    @abc.abstractmethod
    def pre_execute_hook(
        cls: type[TrialController], env: EnvContext, distributed_backend: _DistributedBackend
    ) -> Any:
        """Set up what must exist before user code runs (seeds, the distributed framework)."""

    @classmethod
    @abc.abstractmethod
    def from_trial(
        cls: type[TrialController],
        trial_inst: det.LegacyTrial,
        context: det.TrialContext,
        env: EnvContext,
        workloads: workload.Stream | None = None,
    ) -> TrialController:
        """Build the controller for a constructed trial."""

    @abc.abstractmethod
    def run(self) -> None:
        """Train: handle workloads until the stream ends."""

    @classmethod
    def supports_mixed_precision(cls: type[TrialController]) -> bool:
        return False

    def close(self) -> None:
        close = getattr(self.context, "close", None)
        if callable(close):
            close()

    def upload_tb_files(self) -> None:
        """Copy new TensorBoard files of this rank to storage (workers send only profiler
        files, renamed by rank, as in 0.37)."""
        from determined.tensorboard import util as tb_util

        train = self.context._core.train
        if train.get_tensorboard_path() is None:
            return

        def chief(_: Any) -> bool:
            return True

        def worker(p: Any) -> bool:
            return not p.match("*tfevents*")

        train.upload_tensorboard_files(
            chief if self.is_chief else worker, tb_util.get_rank_aware_path
        )
