"""``determined.pytorch.experimental``: batch inference over a dataset sharded across the ranks
of a trial (0.37's ``torch_batch_process``). See ``docs/pytorch/batch_processing.md``."""

from determined.pytorch.experimental._batch_context import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    get_default_device,
)
from determined.pytorch.experimental._torch_batch_process import torch_batch_process

__all__ = [
    "TorchBatchProcessor",
    "TorchBatchProcessorContext",
    "get_default_device",
    "torch_batch_process",
]
