"""``determined.pytorch``: Determined's PyTorch training API.

``PyTorchTrial`` + ``PyTorchTrialContext`` describe a model; ``init()`` + ``Trainer.fit()`` train
it locally or on a cluster; ``DataLoader`` and :mod:`determined.pytorch.samplers` shard and
resume data. See ``docs/pytorch.md`` and ``docs/pytorch/data.md``.
"""

from determined.pytorch import samplers
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._context import PyTorchExperimentalContext, PyTorchTrialContext
from determined.pytorch._controller import ExitReason
from determined.pytorch._data import DataLoader, adapt_batch_sampler
from determined.pytorch._load import CheckpointLoadContext, load_trial_from_checkpoint_path
from determined.pytorch._lr_scheduler import LRScheduler
from determined.pytorch._reducer import MetricReducer, Reducer
from determined.pytorch._to_device import TorchData, data_length, to_device
from determined.pytorch._trainer import Trainer, init
from determined.pytorch._trial import PyTorchTrial
from determined.pytorch._trial_controller import _PyTorchTrialController
from determined.pytorch._units import Batch, Epoch, TrainUnit

# Set here, not in _trial.py: the controller runs the Trainer, which imports PyTorchTrial.
PyTorchTrial.trial_controller_class = _PyTorchTrialController

__all__ = [
    "Batch",
    "CheckpointLoadContext",
    "DataLoader",
    "Epoch",
    "ExitReason",
    "LRScheduler",
    "MetricReducer",
    "PyTorchCallback",
    "PyTorchExperimentalContext",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Reducer",
    "TorchData",
    "TrainUnit",
    "Trainer",
    "adapt_batch_sampler",
    "data_length",
    "init",
    "load_trial_from_checkpoint_path",
    "samplers",
    "to_device",
]
