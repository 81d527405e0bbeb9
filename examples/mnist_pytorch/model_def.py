"""An MNIST-style convnet as a PyTorchTrial, on synthetic digits made by ``data.py``."""

from __future__ import annotations

from typing import Any

import data
import torch
from torch import nn

from determined import pytorch


class MNISTTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        torch.set_num_threads(1)  # one core per rank: several trials share a small machine
        model = nn.Sequential(
            nn.Conv2d(1, hp["n_filters1"], 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(hp["n_filters1"], hp["n_filters2"], 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Dropout(hp["dropout"]),
            nn.Linear(hp["n_filters2"] * 7 * 7, 10),
        )
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=hp["lr"], momentum=hp["momentum"])
        )
        data_conf = context.get_data_config()
        self.train_set = data.make_digits(data_conf.get("train_size", 4096), seed=0)
        self.val_set = data.make_digits(data_conf.get("val_size", 512), seed=1)

    def build_training_data_loader(self) -> pytorch.DataLoader:
        batch = self.context.get_per_slot_batch_size()
        return pytorch.DataLoader(self.train_set, batch_size=batch, shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.val_set, batch_size=256)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        loss = nn.functional.cross_entropy(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        logits = self.model(images)
        return {
            "validation_loss": nn.functional.cross_entropy(logits, labels),
            "accuracy": (logits.argmax(1) == labels).float().mean(),
        }
