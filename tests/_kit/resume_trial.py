"""The trial of the exact-resume matrix (tests/pytorch/test_resume_matrix.py and its master
cells): self-contained (determined, torch, numpy only), so that it also runs as a master's
``model_def.py``.

``hparams["kind"]`` picks the randomness under test; ``"all"`` combines them:

* ``shuffle``: ``shuffle=True`` without a generator, no workers;
* ``workers``: ``num_workers=2``, and ``__getitem__`` augments each sample with torch, numpy
  and python random numbers (drawn in the worker processes);
* ``dropout``: a dropout layer, drawing from the training process's global torch RNG.

SGD with momentum, so a resume must restore optimizer state too. The weights start from a
fixed generator: the global RNGs are left as each process found them (randomly seeded).
On a cluster, ``hparams["crash_at"]`` (batch counts) makes the process exit (code 17, every
rank) once a checkpoint at one of those batches is committed, so that the master restarts the
trial from that checkpoint.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

import determined as det
from determined import pytorch

FEATURES = 4


class Augmented(torch.utils.data.Dataset):
    """Fixed points; with ``augment``, each load adds torch, numpy and python noise."""

    def __init__(self, n: int, augment: bool) -> None:
        g = torch.Generator().manual_seed(5)
        self.x = torch.randn(n, FEATURES, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        if self.augment:
            x = x + 0.05 * (torch.randn(FEATURES) + float(np.random.normal()) + random.random())
        return x, self.y[i]


class Crash(pytorch.PyTorchCallback):
    """Ends the process once a checkpoint at one of ``at`` (batches) is committed."""

    def __init__(self, context: pytorch.PyTorchTrialContext, at: list[int]) -> None:
        self.context, self.at = context, at

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        if self.context.current_train_batch() + 1 in self.at:
            os._exit(17)


class ResumeTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.hp = context.get_hparams()
        kind = self.hp["kind"]
        self.shuffle = kind in ("shuffle", "all")
        self.workers = 2 if kind in ("workers", "all") else 0
        p = 0.5 if kind in ("dropout", "all") else 0.0
        model = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 8), torch.nn.Dropout(p), torch.nn.Linear(8, 1)
        )
        g = torch.Generator().manual_seed(11)
        with torch.no_grad():
            for param in model.parameters():
                param.copy_(0.5 * torch.randn(param.shape, generator=g))
        self.model = context.wrap_model(model)
        sgd = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.opt = context.wrap_optimizer(sgd)
        self.train_set = Augmented(int(self.hp["n"]), augment=self.workers > 0)
        self.losses: dict[int, float] = {}

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            self.train_set,
            batch_size=int(self.hp["batch_size"]),
            shuffle=self.shuffle,
            num_workers=self.workers,
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(Augmented(8, augment=False), batch_size=4)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        self.losses[batch_idx] = float(loss.detach())
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"val_loss": torch.nn.functional.mse_loss(self.model(x), y)}

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        at = self.hp.get("crash_at")
        if at and det.get_cluster_info() is not None:
            return {"crash": Crash(self.context, at)}
        return {}


def state(trial: ResumeTrial) -> dict[str, Any]:
    """Weights and optimizer state as plain lists (exact float values, JSON-safe)."""
    model = trial.model
    module = getattr(model, "module", model)  # DDP
    opt = trial.opt.state_dict()["state"]
    return {
        "params": [p.detach().flatten().tolist() for p in module.parameters()],
        "momentum": [opt[i]["momentum_buffer"].flatten().tolist() for i in sorted(opt)],
    }
