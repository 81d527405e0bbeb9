"""``det.pytorch.init()`` and ``Trainer``: run a ``PyTorchTrial`` locally or on a cluster."""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import os
import pathlib
import random
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

import determined as det
from determined import core
from determined.pytorch._context import PyTorchTrialContext
from determined.pytorch._controller import Controller, ExitReason, LoopSettings
from determined.pytorch._periods import Periods
from determined.pytorch._trial import PyTorchTrial
from determined.pytorch._units import Batch, Epoch, TrainUnit

logger = logging.getLogger("determined.pytorch")

_MODEL_DIR = pathlib.Path("/run/determined/train/model")
_END_BARRIER_S = 60


def _on_cluster() -> det.ClusterInfo | None:
    info = det.get_cluster_info()
    return info if info is not None and info.task_type == "TRIAL" else None


def _cluster_distributed(info: det.ClusterInfo) -> tuple[core.DistributedContext | None, bool]:
    """The trial's DistributedContext, and whether this call started torch's process group
    (which ``init`` then also ends)."""
    if os.environ.get("USE_TORCH_DISTRIBUTED"):
        import torch.distributed as tdist

        started = not tdist.is_initialized()
        if started:
            tdist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return core.DistributedContext.from_torch_distributed(), started
    if len(info.slot_ids) > 1 or len(info.container_addrs) > 1:
        raise ValueError(
            f"this trial has {len(info.slot_ids)} slots but no distributed backend: launch it "
            "with determined.launch.torch_distributed (which sets USE_TORCH_DISTRIBUTED)"
        )
    return None, False


def _end_process_group(clean: bool) -> None:
    """End the process group ``init`` started, while the interpreter is whole: left to the
    interpreter's teardown, gloo's threads and sockets are destroyed in no set order (the
    suspected cause of aborts seen with FSDP2 on gloo: "terminate called without an active
    exception"; docs/pytorch.md). After a clean run gloo ranks first meet in a barrier (at
    most a minute), so that no rank closes its connections while a peer still uses them;
    after a failure they do not (a peer may be gone)."""
    import torch.distributed as tdist

    if not tdist.is_initialized():
        return
    try:
        if clean and tdist.get_backend() == "gloo":
            # Bounded: a peer that failed after its last collective must not hold this rank
            # for the group's 30-minute default.
            tdist.monitored_barrier(timeout=datetime.timedelta(seconds=_END_BARRIER_S))
    except Exception as e:
        logger.warning(f"ranks did not all meet before ending the process group: {e}")
    finally:
        tdist.destroy_process_group()
        gc.collect()  # modules and device meshes that still hold the group let go of it now


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.random.manual_seed(seed)


@contextlib.contextmanager
def init(
    *,
    hparams: dict[str, Any] | None = None,
    exp_conf: dict[str, Any] | None = None,
    distributed: core.DistributedContext | None = None,
    aggregation_frequency: int = 1,
    enable_tensorboard_logging: bool = True,
) -> Iterator[PyTorchTrialContext]:
    """Build a :class:`PyTorchTrialContext` (and the Core API under it) for ``Trainer``.

    Locally (no cluster info) ``distributed`` and ``exp_conf`` are used as given and nothing
    is seeded. On a cluster the distributed backend comes from the launcher's environment,
    ``exp_conf`` is the trial's config (``hparams`` stays as passed) and python, numpy and
    torch are seeded with the trial seed on every rank. Use as a context manager.
    """
    info = _on_cluster()
    seed, steps = None, 0
    started_group = False
    if info is not None:
        distributed, started_group = _cluster_distributed(info)
        exp_conf = info.trial._config
        seed, steps = info.trial.trial_seed, info.trial._steps_completed
        _seed_everything(seed)
    opts = (exp_conf or {}).get("optimizations") or {}
    # AUTO: core writes the reported metrics as TensorBoard events and syncs the directory
    # (including files from get_tensorboard_writer()) after each report; see docs/pytorch.md.
    tb_mode = (
        core.TensorboardMode.AUTO if enable_tensorboard_logging else core.TensorboardMode.MANUAL
    )
    clean = False
    try:
        with core.init(
            distributed=distributed,
            preempt_mode=core.PreemptMode.WorkersAskChief,
            tensorboard_mode=tb_mode,
        ) as core_context:
            yield PyTorchTrialContext(
                core_context,
                hparams=hparams,
                exp_conf=exp_conf,
                trial_seed=seed,
                aggregation_frequency=aggregation_frequency,
                average_aggregated_gradients=opts.get("average_aggregated_gradients", True),
                steps_completed=steps,
                enable_tensorboard_logging=enable_tensorboard_logging,
            )
        clean = True
    finally:
        if started_group:
            _end_process_group(clean)


def _check_length(max_length: Any, where: str = "in a local run") -> TrainUnit:
    if max_length is None:
        raise ValueError(f"fit(max_length=...) is required {where}, e.g. Batch(1000)")
    if not isinstance(max_length, Batch | Epoch) or not isinstance(max_length.value, int):
        raise TypeError(f"max_length must be Batch(n) or Epoch(n) with an int n: {max_length!r}")
    return max_length


def _code_dir(trial: PyTorchTrial) -> tuple[pathlib.Path | None, str]:
    """The directory to copy into code/, and where under code/ it goes: a module
    ``pkg.sub.mod`` lands in ``code/pkg/sub/`` so that its spec imports from code/."""
    if _MODEL_DIR.is_dir():
        return _MODEL_DIR, ""
    file = getattr(sys.modules.get(type(trial).__module__), "__file__", None)
    if not file:
        return None, ""
    package = _module_name(type(trial)).rpartition(".")[0]
    return pathlib.Path(file).resolve().parent, package.replace(".", "/")


def _module_name(cls: type) -> str:
    # A trial defined in the script being run is importable from code/ by the file's name.
    if cls.__module__ == "__main__":
        file = getattr(sys.modules["__main__"], "__file__", None)
        if file:
            return pathlib.Path(file).stem
    return cls.__module__


def _load_data(
    trial: PyTorchTrial, context: PyTorchTrialContext, is_trainer: bool
) -> dict[str, Any]:
    def maybe(getter: Any) -> Any:
        try:
            return getter()
        except ValueError:
            return None

    cls = type(trial)
    data = {
        "trial_type": "PyTorchTrial",
        "experiment_config": maybe(context.get_experiment_config),
        "hparams": maybe(context.get_hparams),
        "trial_cls_spec": f"{_module_name(cls)}:{cls.__qualname__}",
    }
    if is_trainer:
        data["is_trainer"] = True  # absent for harness runs, as in Determined
    return data


class Trainer:
    """Runs a constructed ``PyTorchTrial`` with the context it was built with."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self._trial = trial
        self._context = context
        self._info = _on_cluster()
        self._is_trainer = True  # False when the harness runs the trial (load_data.json)

    def configure_profiler(
        self,
        sync_timings: bool = True,
        enabled: bool = False,
        begin_on_batch: int = 0,
        end_after_batch: int | None = None,
    ) -> None:
        """Deprecated, and as in 0.37 it changes nothing: profile with
        ``fit(..., profiling_enabled=True)`` instead."""
        message = (
            "Trainer.configure_profiler() does nothing (as in Determined 0.37): pass "
            "profiling_enabled=True to Trainer.fit() instead"
        )
        logger.warning(message)
        warnings.warn(message, FutureWarning, stacklevel=2)

    def fit(
        self,
        checkpoint_period: TrainUnit | None = None,
        validation_period: TrainUnit | None = None,
        max_length: TrainUnit | None = None,
        reporting_period: TrainUnit = Batch(100),
        checkpoint_policy: str = "best",
        latest_checkpoint: str | None = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        profiling_enabled: bool = False,
        async_checkpoints: bool | None = None,
    ) -> ExitReason:
        """Train: see docs/pytorch.md for when it validates, checkpoints and reports.

        Locally ``max_length`` is required. On a cluster ``test_mode`` is refused, and the
        searcher's operations decide the length when the experiment config sets
        ``searcher.max_length`` (``max_length`` is then ignored with a warning, as in
        Determined 0.37); without it (0.38 style) ``max_length`` is required and decides.
        Returns why the loop ended (all work done, or stopped by preemption or a request).

        ``async_checkpoints`` (not in 0.37; None: the config's
        ``optimizations.async_checkpoints``; unset there too: on, unless a callback overrides
        ``on_checkpoint_end``, ``on_checkpoint_write_end`` or ``on_checkpoint_upload_end``)
        blocks training only while a checkpoint is copied to host memory and writes it in the
        background; see docs/pytorch.md for its failure semantics.
        """
        if checkpoint_policy not in ("best", "all", "none"):
            raise ValueError(f"checkpoint_policy must be best, all or none: {checkpoint_policy!r}")
        periods = Periods(
            validation=validation_period or Batch(sys.maxsize),
            checkpoint=checkpoint_period or Batch(sys.maxsize),
            reporting=reporting_period,
        )
        if self._info is None:
            settings = self._local_settings(periods, max_length, checkpoint_policy)
        else:
            settings = self._cluster_settings(
                periods, max_length, checkpoint_policy, test_mode, latest_checkpoint
            )
        if self._context.distributed.get_size() > 1 and not os.environ.get("USE_TORCH_DISTRIBUTED"):
            raise ValueError(
                "distributed training with torch needs USE_TORCH_DISTRIBUTED=1 in the "
                "environment and torch.distributed.init_process_group() called first"
            )
        code_dir, code_subdir = _code_dir(self._trial)
        settings = _replace(
            settings,
            test_mode=test_mode,
            step_zero_validation=step_zero_validation,
            latest_checkpoint=latest_checkpoint,
            profiling_enabled=profiling_enabled,
            async_checkpoints=self._async_checkpoints(async_checkpoints),
            load_data=_load_data(self._trial, self._context, self._is_trainer),
            code_dir=code_dir,
            code_subdir=code_subdir,
        )
        reason = Controller(self._trial, self._context, settings).run()
        logger.info(f"training ended: {reason.value}")
        return reason

    def _async_checkpoints(self, arg: bool | None) -> bool | None:
        if arg is None:
            arg = (self._config().get("optimizations") or {}).get("async_checkpoints")
        if arg is not None and not isinstance(arg, bool):
            raise TypeError(f"async_checkpoints must be True, False or None, not {arg!r}")
        return arg

    def _config(self) -> dict[str, Any]:
        return self._context._exp_conf or {}

    def _common(self, periods: Periods, policy: str) -> dict[str, Any]:
        conf = self._config()
        searcher = conf.get("searcher") or {}
        return {
            "periods": periods,
            "checkpoint_policy": policy,
            "searcher_metric": searcher.get("metric"),
            "smaller_is_better": searcher.get("smaller_is_better", True),
            "average_training_metrics": (conf.get("optimizations") or {}).get(
                "average_training_metrics", True
            ),
        }

    def _local_settings(self, periods: Periods, max_length: Any, policy: str) -> LoopSettings:
        length = _check_length(max_length)
        common = self._common(periods, policy)
        if policy == "best" and common["searcher_metric"] is None:
            logger.warning(
                "checkpoint_policy='best' needs searcher.metric in exp_conf to rank "
                "validations; checkpointing after every validation ('all') instead"
            )
            common["checkpoint_policy"] = "all"
        seed = (self._config().get("reproducibility") or {}).get("experiment_seed")
        bar = sys.stderr.isatty()
        return LoopSettings(max_length=length, data_seed=seed, progress_bar=bar, **common)

    def _cluster_settings(
        self,
        periods: Periods,
        max_length: Any,
        policy: str,
        test_mode: bool,
        latest_checkpoint: str | None,
    ) -> LoopSettings:
        assert self._info is not None
        if test_mode:
            raise ValueError("test_mode is only for local runs; run it without a master")
        if self._info.latest_checkpoint is not None and latest_checkpoint is None:
            logger.warning(
                "the cluster has a latest checkpoint for this trial: pass "
                "latest_checkpoint=det.get_cluster_info().latest_checkpoint to resume from it"
            )
        hparams = self._context._hparams or {}
        common = {
            "global_batch_size": hparams.get("global_batch_size"),
            "trial_id": self._info.trial.trial_id,
            "data_seed": self._info.trial.trial_seed,
            "on_cluster": True,
            **self._common(periods, policy),
        }
        searcher = self._config().get("searcher") or {}
        custom = searcher.get("name") == "custom"  # its runner sends the lengths
        if searcher.get("max_length") is None and not custom:
            # Determined 0.38: the trial decides its own length and reports the fraction done.
            length = _check_length(
                max_length,
                "on a cluster when the experiment config has no searcher.max_length (0.38 style)",
            )
            _warn_if_unlike_max_time(length, searcher)
            return LoopSettings(max_length=length, length_metrics=True, **common)
        if max_length is not None:
            warnings.warn(
                "max_length is ignored on a cluster when the experiment config sets "
                "searcher.max_length: the searcher decides the length",
                stacklevel=3,
            )
        unit = self._context._core.searcher.get_configured_units()
        if unit is None and custom:
            unit = core.Unit.BATCHES  # 0.37's master counts a custom search's lengths in batches
        return LoopSettings(searcher_unit=unit, **common)


def _warn_if_unlike_max_time(length: TrainUnit, searcher: dict[str, Any]) -> None:
    metric, max_time = searcher.get("time_metric"), searcher.get("max_time")
    unit = {"batches": Batch, "epochs": Epoch}.get(str(metric))
    if unit is not None and max_time is not None and length != unit(max_time):
        logger.warning(
            f"fit(max_length={length!r}) differs from searcher.time_metric {metric!r} with "
            f"max_time {max_time}: the search ranks trials up to max_time"
        )


def _replace(settings: LoopSettings, **changes: Any) -> LoopSettings:
    import dataclasses

    return dataclasses.replace(settings, **changes)
