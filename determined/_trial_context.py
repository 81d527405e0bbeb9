"""``det.TrialContext``: what a legacy ``LegacyTrial`` / ``TrialController`` pair reads about its
trial (hyperparameters, config, ids) and the Core API it trains through (``context._core``)."""

from __future__ import annotations

import logging
import pathlib
from typing import TYPE_CHECKING, Any

from determined._env_context import EnvContext

if TYPE_CHECKING:
    from determined import core

logger = logging.getLogger("determined")


class TrialContext:
    """The system's side of a legacy trial. The harness builds it as
    ``trial_class.trial_context_class(core_context, env)``; subclasses add framework methods."""

    def __init__(self, core_context: core.Context, env: EnvContext) -> None:
        self._core = core_context
        self.env = env
        self.distributed = core_context.distributed
        self._stop_requested = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TrialContext:
        """A context for trying a trial class outside Determined: hyperparameters are sampled
        from ``config["hyperparameters"]``, checkpoints go to a temporary directory and
        reports are logged."""
        from determined import _execution

        core_context, env = _execution._make_local_execution_env(
            managed_training=False, test_mode=False, config=config, checkpoint_dir=None
        )
        core_context.start()
        return cls(core_context, env)

    def get_experiment_config(self) -> dict[str, Any]:
        """The experiment configuration (a ``det.ExperimentConfig``)."""
        return self.env.experiment_config

    def get_data_config(self) -> dict[str, Any]:
        """The config's ``data`` section (``{}`` when it has none)."""
        return dict(self.env.experiment_config.get("data") or {})

    def get_experiment_id(self) -> int:
        return int(self.env.det_experiment_id)

    def get_trial_id(self) -> int:
        return int(self.env.det_trial_id)

    def get_trial_seed(self) -> int:
        return self.env.trial_seed

    def get_hparams(self) -> dict[str, Any]:
        """This trial's hyperparameter values by name (nested ones as dicts)."""
        return self.env.hparams

    def get_hparam(self, name: str) -> Any:
        """One hyperparameter's value; ValueError names the fix when it is not defined."""
        if name not in self.env.hparams:
            raise ValueError(
                f"no hyperparameter {name!r} in this trial: define it in the experiment "
                f"config's hyperparameters section (defined: {sorted(self.env.hparams)})"
            )
        return self.env.hparams[name]

    def get_stop_requested(self) -> bool:
        """Whether trial code asked the trial to stop (see :meth:`set_stop_requested`)."""
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the trial to stop after the current workload: it checkpoints and exits, and the
        search counts it as finished."""
        if not isinstance(stop_requested, bool):
            raise TypeError(f"stop_requested must be a bool, not {type(stop_requested).__name__}")
        if stop_requested:
            logger.info("trial stop requested: stopping after the current workload")
        self._stop_requested = stop_requested

    def get_initial_batch(self) -> int:
        """The number of batches trained before this run started (0 on a fresh trial)."""
        return self.env.steps_completed

    def get_tensorboard_path(self) -> pathlib.Path:
        """The directory whose files become this trial's TensorBoard data."""
        path = self._core.train.get_tensorboard_path()
        if path is None:
            raise RuntimeError("this trial has no TensorBoard directory (a local run without one)")
        return path
