"""A small character-level language model (embedding -> GRU -> linear) as a PyTorchTrial,
on text made by ``text.py``."""

from __future__ import annotations

from typing import Any

import text
import torch
from torch import nn

from determined import pytorch


class CharLM(nn.Module):
    def __init__(self, vocab: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(ids))
        return self.head(out)  # [batch, length, vocab]


class CharLMTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        torch.set_num_threads(1)  # one core per rank: several trials share a small machine
        vocab = len(text.VOCAB)
        self.model = context.wrap_model(CharLM(vocab, hp["embed"], hp["hidden"]))
        self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=hp["lr"]))
        data_conf = context.get_data_config()
        length = hp["seq_len"]
        train_ids = text.encode(text.make_text(data_conf.get("train_chars", 8000), seed=0))
        val_ids = text.encode(text.make_text(data_conf.get("val_chars", 2000), seed=1))
        self.train_set = text.Windows(train_ids, length, stride=length // 4)
        self.val_set = text.Windows(val_ids, length, stride=length)

    def build_training_data_loader(self) -> pytorch.DataLoader:
        batch = self.context.get_per_slot_batch_size()
        return pytorch.DataLoader(self.train_set, batch_size=batch, shuffle=True, drop_last=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.val_set, batch_size=16)  # 4 batches: 2 per rank on 2 slots

    def _loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = batch
        logits = self.model(inputs)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        accuracy = (logits.argmax(-1) == targets).float().mean()
        return loss, accuracy

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        loss, _ = self._loss(batch)
        self.context.backward(loss)
        self.context.step_optimizer(
            self.opt, clip_grads=lambda params: nn.utils.clip_grad_norm_(params, 1.0)
        )
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        loss, accuracy = self._loss(batch)
        return {"validation_loss": loss, "accuracy": accuracy}
