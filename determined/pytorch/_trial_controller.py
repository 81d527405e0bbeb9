"""``PyTorchTrial.trial_controller_class``: 0.37's ``_PyTorchTrialController`` constructor over
our ``Trainer``, for code that drives a PyTorchTrial through the legacy controller interface."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import determined as det
from determined.pytorch._trainer import Trainer

if TYPE_CHECKING:
    from determined.pytorch._context import PyTorchTrialContext
    from determined.pytorch._trial import PyTorchTrial
    from determined.pytorch._units import TrainUnit


class _PyTorchTrialController(det.TrialController):
    """Trains one ``PyTorchTrial`` with the given periods (``run()`` is ``Trainer.fit``).

    ``smaller_is_better``, ``searcher_metric_name``, ``steps_completed``,
    ``global_batch_size`` and ``local_training`` are read from the trial's context and the
    cluster instead (the arguments are accepted for 0.37's signature).
    """

    def __init__(
        self,
        trial_inst: PyTorchTrial,
        context: PyTorchTrialContext,
        checkpoint_period: TrainUnit,
        validation_period: TrainUnit,
        reporting_period: TrainUnit,
        smaller_is_better: bool,
        steps_completed: int,
        latest_checkpoint: str | None,
        local_training: bool,
        test_mode: bool,
        searcher_metric_name: str | None,
        checkpoint_policy: str,
        step_zero_validation: bool,
        max_length: TrainUnit | None,
        global_batch_size: int | None,
        profiling_enabled: bool | None,
    ) -> None:
        # No EnvContext here (0.37's PyTorch controller had none either): the base class's
        # attributes are set directly.
        self.context = context
        self.trial = trial_inst
        self.workloads = None
        self.is_chief = context.distributed.get_rank() == 0
        self._fit_kwargs: dict[str, Any] = {
            "checkpoint_period": checkpoint_period,
            "validation_period": validation_period,
            "reporting_period": reporting_period,
            "latest_checkpoint": latest_checkpoint,
            "test_mode": test_mode,
            "checkpoint_policy": checkpoint_policy,
            "step_zero_validation": step_zero_validation,
            "max_length": max_length,
            "profiling_enabled": bool(profiling_enabled),
        }

    @classmethod
    def pre_execute_hook(
        cls: type[det.TrialController],
        env: det.EnvContext,
        distributed_backend: det._DistributedBackend,
    ) -> None:
        """Nothing to do: ``pytorch.init()`` seeds and sets up torch.distributed."""

    @classmethod
    def from_trial(
        cls: type[det.TrialController], *args: Any, **kwargs: Any
    ) -> det.TrialController:
        raise NotImplementedError(
            "a PyTorchTrial is trained with pytorch.Trainer(trial, context).fit(...); the "
            "harness does that for module:Class entrypoints"
        )

    def run(self) -> Any:
        return Trainer(self.trial, self.context).fit(**self._fit_kwargs)
