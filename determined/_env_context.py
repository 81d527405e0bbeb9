"""``det.EnvContext``: everything the legacy harness knew about the trial's environment, in one
object (the reference's constructor, argument for argument)."""

from __future__ import annotations

from typing import Any

from determined._experiment_config import ExperimentConfig


class EnvContext:
    """Built by the harness from ``det.get_cluster_info()`` (or for a local run); legacy
    ``TrialController`` and ``TrialContext`` code reads its attributes."""

    def __init__(
        self,
        master_url: str,
        master_cert_file: str | None,
        master_cert_name: str | None,
        experiment_config: dict[str, Any],
        hparams: dict[str, Any],
        latest_checkpoint: str | None,
        steps_completed: int,
        use_gpu: bool,
        container_gpus: list[str],
        slot_ids: list[int],
        debug: bool,
        det_trial_id: str,
        det_experiment_id: str,
        det_agent_id: str,
        det_cluster_id: str,
        trial_seed: int,
        trial_run_id: int,
        allocation_id: str,
        managed_training: bool,
        test_mode: bool,
        on_cluster: bool,
    ) -> None:
        self.master_url = master_url
        self.master_cert_file = master_cert_file
        self.master_cert_name = master_cert_name
        self.experiment_config = ExperimentConfig(experiment_config)
        self.hparams = hparams
        self.latest_checkpoint = latest_checkpoint
        self.steps_completed = steps_completed
        self.use_gpu = use_gpu
        self.container_gpus = container_gpus
        self.slot_ids = slot_ids
        self.debug = debug
        self.det_trial_id = det_trial_id
        self.det_experiment_id = det_experiment_id
        self.det_agent_id = det_agent_id
        self.det_cluster_id = det_cluster_id
        self.trial_seed = trial_seed
        self.trial_run_id = trial_run_id
        self.allocation_id = allocation_id
        self.managed_training = managed_training
        self.test_mode = test_mode
        self.on_cluster = on_cluster

    @classmethod
    def _from_cluster_info(cls, info: Any) -> EnvContext:
        """The environment of a trial a master started (``info`` is ``det.ClusterInfo``)."""
        trial = info.trial
        return cls(
            master_url=info.master_url,
            master_cert_file=info.master_cert_file,
            master_cert_name=info.master_cert_name,
            experiment_config=trial._config,
            hparams=trial.hparams,
            latest_checkpoint=info.latest_checkpoint,
            steps_completed=trial._steps_completed,
            use_gpu=bool(info.gpu_uuids),
            container_gpus=list(info.gpu_uuids),
            slot_ids=list(info.slot_ids),
            debug=trial._debug,
            det_trial_id=str(trial.trial_id),
            det_experiment_id=str(trial.experiment_id),
            det_agent_id=info.agent_id,
            det_cluster_id=info.cluster_id,
            trial_seed=trial.trial_seed,
            trial_run_id=trial._trial_run_id,
            allocation_id=info.allocation_id,
            managed_training=True,
            test_mode=False,
            on_cluster=True,
        )
