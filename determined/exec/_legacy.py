"""Running a ``det.LegacyTrial`` with its own ``trial_controller_class`` in a trial process:
0.37's harness sequence on our Core API.

    controller_class.pre_execute_hook(env, distributed_backend)
    core.init(distributed=..., preempt_mode=ChiefOnly, tensorboard_mode=MANUAL)
    context = trial_class.trial_context_class(core_context, env)
    trial = trial_class(context)
    controller_class.from_trial(trial_inst=trial, context=context, env=env).run()
"""

from __future__ import annotations

import logging
import os

import determined as det
from determined import core

logger = logging.getLogger("determined.exec.harness")


def _distributed(info: det.ClusterInfo) -> core.DistributedContext | None:
    """The ranks torchrun (``determined.launch.torch_distributed``) gave this process, when
    there is more than one."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if det._DistributedBackend().use_deepspeed() and "GROUP_RANK" not in os.environ:
            # determined.launch.deepspeed: DeepSpeed's launcher names the ranks its own way.
            return core.DistributedContext.from_deepspeed()
        return core.DistributedContext.from_torch_distributed()
    if len(info.container_addrs) > 1 or len(info.slot_ids) > 1:
        raise ValueError(
            "this trial has several slots but no launcher gave it ranks: run it through "
            "determined.launch.torch_distributed (the default for module:Class entrypoints) "
            "or, for a DeepSpeedTrial, determined.launch.deepspeed"
        )
    return None


def run_legacy_trial(trial_class: type[det.LegacyTrial], info: det.ClusterInfo) -> None:
    """Build and run ``trial_class`` with its controller until the search is done, the
    trial is preempted (paused) or it asks to stop."""
    controller_class = trial_class.trial_controller_class
    if controller_class is None:
        raise TypeError(f"{trial_class.__name__} has no trial_controller_class")
    env = det.EnvContext._from_cluster_info(info)
    controller_class.pre_execute_hook(env, det._DistributedBackend())
    with core.init(
        distributed=_distributed(info),
        preempt_mode=core.PreemptMode.ChiefOnly,
        tensorboard_mode=core.TensorboardMode.MANUAL,
    ) as core_context:
        context = trial_class.trial_context_class(core_context, env)
        trial = trial_class(context)
        logger.info(f"Creating {controller_class.__name__} with {trial_class.__name__}.")
        controller = controller_class.from_trial(trial_inst=trial, context=context, env=env)
        controller.run()
