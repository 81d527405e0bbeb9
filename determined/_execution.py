"""Running a legacy trial class without a master: the environment ``TrialContext.from_config``
builds, and the one-batch test run of ``det experiment create --local --test``."""

from __future__ import annotations

import logging
import math
import pathlib
import random
import sys
import tempfile
from typing import Any

import determined as det
from determined._env_context import EnvContext

logger = logging.getLogger("determined")

# Keys a local run has no use for (they configure the cluster side).
_CLUSTER_ONLY_KEYS = (
    "bind_mounts",
    "checkpoint_storage",
    "environment",
    "resources",
    "optimizations",
)


def _generate_random_hparam_values(hparam_def: dict[str, Any]) -> dict[str, Any]:
    """One sample of a ``hyperparameters`` section (nested sections as dicts)."""

    def sample(h: Any) -> Any:
        if isinstance(h, dict):
            kind = h.get("type")
            if kind is None:
                return _generate_random_hparam_values(h)
            if kind == "const":
                return h["val"]
            if kind == "int":
                return random.randint(h["minval"], h["maxval"])
            if kind == "double":
                return random.uniform(h["minval"], h["maxval"])
            if kind == "categorical":
                return random.choice(h["vals"])
            if kind == "log":
                return math.pow(h["base"], random.uniform(h["minval"], h["maxval"]))
            raise ValueError(
                f"hyperparameter type {kind!r} is not one of const, int, double, categorical, log"
            )
        return h

    return {name: sample(h) for name, h in hparam_def.items()}


def _make_local_execution_exp_config(
    input_config: dict[str, Any] | None,
    checkpoint_dir: str,
    managed_training: bool,
    test_mode: bool,
) -> dict[str, Any]:
    """A config for a local run: the input with cluster-only sections dropped, checkpoints in
    ``checkpoint_dir`` and the top-level defaults of a master-filled config."""
    config = dict(input_config or {})
    for key in _CLUSTER_ONLY_KEYS:
        if key in config and test_mode and not managed_training:
            logger.info(f"{key!r} is ignored by a local run")
        config.pop(key, None)
    defaults = {
        "scheduling_unit": 100,
        "checkpoint_policy": "best",
        "perform_initial_validation": False,
        "min_validation_period": {},
        "min_checkpoint_period": {},
        "hyperparameters": {},
        "searcher": {"name": "single", "metric": "validation_loss", "smaller_is_better": True},
    }
    storage = {"type": "shared_fs", "host_path": str(pathlib.Path(checkpoint_dir).resolve())}
    return {"checkpoint_storage": storage, **defaults, **config}


def _make_local_execution_env(
    managed_training: bool,
    test_mode: bool,
    config: dict[str, Any] | None,
    checkpoint_dir: str | None,
    tensorboard_path: pathlib.Path | None = None,
    hparams: dict[str, Any] | None = None,
    limit_gpus: int | None = None,
) -> tuple[Any, EnvContext]:
    """A local Core API (checkpoints under ``checkpoint_dir``, a temporary directory when None;
    reports logged; one searcher operation) and the EnvContext of a local run. The Core
    context is not started."""
    from determined import core
    from determined.core import _context

    checkpoint_dir = checkpoint_dir or tempfile.mkdtemp(prefix="det-local-")
    conf = det.ExperimentConfig(
        _make_local_execution_exp_config(config, checkpoint_dir, managed_training, test_mode)
    )
    hparams = hparams or _generate_random_hparam_values(conf.get("hyperparameters") or {})
    env = EnvContext(
        master_url="",
        master_cert_file=None,
        master_cert_name=None,
        experiment_config=conf,
        hparams=hparams,
        latest_checkpoint=None,
        steps_completed=0,
        use_gpu=False,  # a local run of a legacy trial uses no accelerator of its own accord
        container_gpus=[],
        slot_ids=[],
        debug=conf.debug_enabled(),
        det_trial_id="",
        det_experiment_id="",
        det_agent_id="",
        det_cluster_id="",
        trial_seed=conf.experiment_seed(),
        trial_run_id=1,
        allocation_id="",
        managed_training=managed_training,
        test_mode=test_mode,
        on_cluster=False,
    )
    core_context = _context._local_init(
        None, checkpoint_dir, core.PreemptMode.WorkersAskChief, core.TensorboardMode.MANUAL
    )
    if tensorboard_path is not None:
        core_context.train._tb_path = tensorboard_path
    return core_context, env


def _make_test_workloads(config: det.ExperimentConfig) -> Any:
    """Train one batch, validate, checkpoint; each response is checked."""
    from determined import workload

    interceptor = workload.WorkloadResponseInterceptor()
    logger.info("training one batch")
    yield from interceptor.send(workload.train_workload(1, num_batches=1))
    metrics = interceptor.metrics_result()
    logger.info(f"training metrics: {(metrics.get('metrics') or {}).get('avg_metrics')}")
    logger.info("validating")
    yield from interceptor.send(workload.validation_workload(1, total_batches_processed=1))
    validation = interceptor.metrics_result()
    logger.info(
        f"validation metrics: {(validation.get('metrics') or {}).get('validation_metrics')}"
    )
    logger.info("checkpointing")
    yield from interceptor.send(workload.checkpoint_workload(1, total_batches_processed=1))
    interceptor.metrics_result()


def test_one_batch(trial_class: type[det.LegacyTrial], config: dict[str, Any] | None = None) -> Any:
    """Build ``trial_class`` with hyperparameters sampled from ``config`` and run it locally for
    one training batch, one validation and one checkpoint (in a temporary directory): a
    ``PyTorchTrial`` with ``Trainer.fit(test_mode=True)``, any other trial through its own
    ``trial_controller_class`` (0.37's ``determined.experimental.test_one_batch``). Raises what
    the trial raises."""
    config = {**(config or {}), "scheduling_unit": 1}
    pytorch = sys.modules.get("determined.pytorch")
    if pytorch is not None and issubclass(trial_class, pytorch.PyTorchTrial):
        hparams = _generate_random_hparam_values(config.get("hyperparameters") or {})
        with pytorch.init(hparams=hparams, exp_conf=config) as context:
            pytorch.Trainer(trial_class(context), context).fit(
                max_length=pytorch.Batch(1), test_mode=True
            )
        logger.info("the test run passed")
        return None
    controller_class = trial_class.trial_controller_class
    if controller_class is None:
        raise TypeError(
            f"{trial_class.__name__} has no trial_controller_class: set it to the "
            "det.TrialController subclass that trains it"
        )
    with tempfile.TemporaryDirectory() as checkpoint_dir:
        core_context, env = _make_local_execution_env(
            managed_training=True, test_mode=True, config=config, checkpoint_dir=checkpoint_dir
        )
        logger.info(f"hyperparameters: {env.hparams}")
        with core_context:
            controller_class.pre_execute_hook(env, det._DistributedBackend())
            context = trial_class.trial_context_class(core_context, env)
            trial = trial_class(context)
            controller = controller_class.from_trial(
                trial_inst=trial,
                context=context,
                env=env,
                workloads=_make_test_workloads(env.experiment_config),
            )
            controller.run()
    logger.info("the test run passed")
    return controller


test_one_batch.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
