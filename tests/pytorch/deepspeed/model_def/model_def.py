"""A tiny DeepSpeedTrial for the e2e tests: a two-layer MLP regressing a fixed synthetic
target, ZeRO stage from the hyperparameters, SGD with momentum inside the engine."""

from __future__ import annotations

import os
import signal
from typing import Any

import deepspeed
import torch

from determined import pytorch
from determined.pytorch import deepspeed as det_ds


class Points(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class Trial(det_ds.DeepSpeedTrial):
    def __init__(self, context: det_ds.DeepSpeedTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        self.hp = hp
        config = det_ds.overwrite_deepspeed_config(
            {
                "train_batch_size": 8,
                "train_micro_batch_size_per_gpu": 2,
                "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}},
                "zero_optimization": {"stage": 0},
                "zero_allow_untested_optimizer": True,
            },
            {"zero_optimization": {"stage": hp["zero_stage"]}},
        )
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=config
        )
        self.engine = context.wrap_model_engine(engine)

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(Points(64, 1), batch_size=2, shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(Points(16, 2), batch_size=2)

    def train_batch(self, it: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        crash = self.hp.get("crash_at_batch")
        run = int(os.environ.get("DET_TRIAL_RUN_ID", "0"))
        chief = self.context.distributed.get_rank() == 0
        if crash is not None and batch_idx == crash and run <= 1 and chief:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = self.context.to_device(next(it))
        loss = torch.nn.functional.mse_loss(self.engine(x), y)
        self.engine.backward(loss)
        self.engine.step()
        return {"loss": loss}

    def evaluate_batch(self, it: Any, batch_idx: int) -> dict[str, Any]:
        x, y = self.context.to_device(next(it))
        weights = torch.cat([p.detach().flatten() for p in self.engine.module.parameters()])
        return {
            "val_loss": torch.nn.functional.mse_loss(self.engine(x), y),
            "weight_sum": weights.double().sum(),
        }
