"""``determined.pytorch.deepspeed``: train DeepSpeed engines as a Determined trial (the
``[deepspeed]`` extra). See docs/deepspeed.md.

A ``DeepSpeedTrial`` builds its engines with ``deepspeed.initialize`` and registers them with
``DeepSpeedTrialContext.wrap_model_engine``; ``DeepSpeedTrialController`` trains it from the
searcher's operations, one process per slot (``python -m determined.launch.deepspeed --trial
model_def:Trial``), and checkpoints every rank's shards into one Determined checkpoint.
"""

from determined.pytorch.deepspeed._context import (
    DeepSpeedTrialContext,
    overwrite_deepspeed_config,
)
from determined.pytorch.deepspeed._controller import DeepSpeedTrialController
from determined.pytorch.deepspeed._mpu import (
    ModelParallelUnit,
    make_data_parallel_mpu,
    make_deepspeed_mpu,
)
from determined.pytorch.deepspeed._trial import DeepSpeedTrial

# Set here, not in _trial.py: the controller imports the trial class.
DeepSpeedTrial.trial_controller_class = DeepSpeedTrialController

__all__ = [
    "DeepSpeedTrial",
    "DeepSpeedTrialContext",
    "DeepSpeedTrialController",
    "ModelParallelUnit",
    "make_data_parallel_mpu",
    "make_deepspeed_mpu",
    "overwrite_deepspeed_config",
]
