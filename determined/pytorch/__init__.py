"""``determined.pytorch``: Determined's PyTorch training API.

So far: the data-loading layer (``DataLoader``, samplers in :mod:`determined.pytorch.samplers`,
``to_device``, ``data_length``). See ``docs/pytorch/data.md``.
"""

from determined.pytorch import samplers
from determined.pytorch._data import DataLoader, adapt_batch_sampler
from determined.pytorch._to_device import TorchData, data_length, to_device

__all__ = [
    "DataLoader",
    "TorchData",
    "adapt_batch_sampler",
    "data_length",
    "samplers",
    "to_device",
]
