"""Gradient aggregation, AMP scaling and optimizer stepping for ``PyTorchTrialContext``.

With ``aggregation_frequency`` N, batch ``idx`` "communicates" when ``(idx + 1) % N == 0``:
only then do DDP ranks all-reduce gradients and the optimizer step; in between, gradients
accumulate locally (``no_sync``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from determined import errors


class _Optimization:
    def __init__(self, aggregation_frequency: int, average: bool, managed: bool) -> None:
        if aggregation_frequency < 1:
            raise errors.InvalidExperimentException(
                f"optimizations.aggregation_frequency is {aggregation_frequency}; must be >= 1"
            )
        self.agg = aggregation_frequency
        self.average = average
        self.managed = managed
        self.scaler: Any = None
        self.batch_idx: int | None = None

    def communicates(self) -> bool:
        if not self.managed:
            return True
        if self.batch_idx is None:
            raise errors.InternalException(
                "gradient aggregation is only defined while training: call backward() and "
                "step_optimizer() from train_batch()"
            )
        return (self.batch_idx + 1) % self.agg == 0

    def _no_sync(self, models: Sequence[torch.nn.Module]) -> list[Any]:
        if self.agg == 1 or self.communicates():
            return []
        ddp = torch.nn.parallel.DistributedDataParallel
        return [m.no_sync() for m in models if isinstance(m, ddp)]

    def backward(
        self,
        models: Sequence[torch.nn.Module],
        loss: torch.Tensor,
        gradient: torch.Tensor | None,
        retain_graph: bool,
        create_graph: bool,
        auto_amp: bool,
    ) -> None:
        no_sync = [] if self.agg == 1 else self._no_sync(models)
        if not auto_amp and not no_sync:  # the common case, kept free of context managers
            loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)
            return
        if auto_amp and self.scaler is not None:
            loss = self.scaler.scale(loss)
        with contextlib.ExitStack() as stack:
            for ctx in no_sync:
                stack.enter_context(ctx)
            # Backward outside autocast, as torch recommends; train_batch runs under it.
            stack.enter_context(torch.autocast(loss.device.type, enabled=False))
            loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Any], None] | None,
        auto_zero_grads: bool,
        scaler: Any,
        auto_amp: bool,
    ) -> None:
        if self.agg > 1 and not auto_zero_grads:
            raise errors.InvalidExperimentException(
                "auto_zero_grads=False cannot be combined with aggregation_frequency > 1: "
                "gradients must be zeroed after each aggregated step"
            )
        # (agg == 1 with a batch index always communicates: skip the call, it runs every batch)
        if (self.agg > 1 or self.batch_idx is None) and not self.communicates():
            return  # gradients keep accumulating until the window's last batch
        if self.average and self.agg > 1:
            for p in _params(optimizer):
                if p.grad is not None:
                    p.grad.div_(self.agg)
        scaler = scaler if scaler is not None else self.scaler
        if clip_grads is not None:
            if auto_amp and scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads(_params(optimizer))
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()


def _params(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]
