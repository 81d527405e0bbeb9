"""Running a ``PyTorchTrial`` class as a trial a master started: what the launch layer's
``determined.exec.harness`` calls. The experiment config decides every ``fit()`` argument."""

from __future__ import annotations

from typing import Any

import determined as det
from determined.common import expconf
from determined.pytorch._controller import ExitReason
from determined.pytorch._trainer import Trainer, init
from determined.pytorch._trial import PyTorchTrial
from determined.pytorch._units import Batch, TrainUnit


def _period(length: expconf.Length, gbs: int | None) -> TrainUnit:
    unit = (length.unit or expconf.Unit.BATCHES).value
    return TrainUnit._from_values(**{unit: length.value}, global_batch_size=gbs)


def fit_arguments(
    config: expconf.ExperimentConfig, hparams: dict[str, Any], latest_checkpoint: str | None
) -> dict[str, Any]:
    """``Trainer.fit()`` keyword arguments from an experiment config: ``min_checkpoint_period``,
    ``min_validation_period`` (records via ``global_batch_size``), ``Batch(scheduling_unit)``,
    ``checkpoint_policy``, ``perform_initial_validation`` and ``profiling.enabled``."""
    gbs = hparams.get("global_batch_size")
    return {
        "checkpoint_period": _period(config.min_checkpoint_period, gbs),
        "validation_period": _period(config.min_validation_period, gbs),
        "reporting_period": Batch(config.scheduling_unit),
        "checkpoint_policy": config.checkpoint_policy,
        "latest_checkpoint": latest_checkpoint,
        "step_zero_validation": config.perform_initial_validation,
        "profiling_enabled": config.profiling.enabled,
    }


def run_trial(trial_class: type[PyTorchTrial], info: det.ClusterInfo | None = None) -> ExitReason:
    """Build ``trial_class`` with the trial's hyperparameters and config and train it as the
    master directs. Every rank calls this. Raises RuntimeError outside a cluster trial."""
    info = info or det.get_cluster_info()
    if info is None or info.task_type != "TRIAL":
        raise RuntimeError("run_trial() runs a trial started by a master; use Trainer locally")
    config, hparams = info.trial._experiment_config(), info.trial.hparams
    with init(
        hparams=hparams,
        exp_conf=info.trial._config,  # the user's get_experiment_config(): as the master sent it
        aggregation_frequency=config.optimizations.aggregation_frequency,
    ) as context:
        trial = trial_class(context)
        kwargs = fit_arguments(config, hparams, info.latest_checkpoint)
        trainer = Trainer(trial, context)
        trainer._is_trainer = False
        return trainer.fit(**kwargs)
