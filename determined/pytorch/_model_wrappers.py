"""The module wrappers ``PyTorchTrialContext`` hands back: both stay transparent to the user's
code, which keeps reading its own attributes and methods through them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

logger = logging.getLogger("determined.pytorch")


class _PassThroughDDP(torch.nn.parallel.DistributedDataParallel):
    """DistributedDataParallel whose failed attribute lookups fall through to the wrapped
    module, so ``self.model.weight`` or ``self.model.my_method()`` work under DDP as they do
    on one slot (docs/reference/harness.md §10 wrap_model)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    ids = [device.index] if device.type == "cuda" else None
    return _PassThroughDDP(model, device_ids=ids)


def _float_outputs(output: Any, warned: set[type]) -> Any:
    """Half-precision tensors in ``output`` (nested lists, tuples, dicts) back to float32, so
    that the loss is computed outside autocast's precision."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
    if isinstance(output, dict):
        return {k: _float_outputs(v, warned) for k, v in output.items()}
    if isinstance(output, (list, tuple)):
        return type(output)(_float_outputs(v, warned) for v in output)
    if type(output) not in warned:
        warned.add(type(output))
        logger.warning(
            f"autocast_forward_pass: a {type(output).__name__} output is returned as is; "
            "autocast the forward pass yourself if it holds half-precision tensors"
        )
    return output


def autocast_forward_pass(
    module: torch.nn.Module, autocast: Callable[[], AbstractContextManager[Any]]
) -> torch.nn.Module:
    """A view of ``module`` whose ``forward`` runs under ``autocast()`` and returns float32.

    The view is an instance of a subclass of ``type(module)`` with no state of its own: every
    attribute read, write and delete goes to ``module`` (so ``isinstance``, ``state_dict()``,
    ``parameters()`` and hooks are those of ``module``), as 0.37's wrapper is.
    """
    warned: set[type] = set()

    class _AutocastForward(type(module)):  # type: ignore[misc]
        def __getattr__(self, name: str) -> Any:
            return getattr(module, name)

        def __setattr__(self, name: str, value: Any) -> None:
            setattr(module, name, value)

        def __delattr__(self, name: str) -> None:
            delattr(module, name)

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            with autocast():
                output = module.forward(*args, **kwargs)
            return _float_outputs(output, warned)

    _AutocastForward.__name__ = _AutocastForward.__qualname__ = type(module).__name__
    return object.__new__(_AutocastForward)
