"""Small real trials for the pytorch tests: synthetic regression data, a tiny MLP."""

from __future__ import annotations

from typing import Any

import torch

import determined.pytorch as det_torch
from determined.pytorch import PyTorchCallback, PyTorchTrialContext

torch.set_num_threads(1)


class Regression(torch.utils.data.Dataset):
    """y = x @ w + noise, fixed by ``seed``; records which indices were loaded."""

    def __init__(self, n: int = 40, features: int = 4, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, features, generator=g)
        self.y = self.x @ torch.arange(1.0, features + 1) + 0.1 * torch.randn(n, generator=g)
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.loaded.append(i)
        return self.x[i], self.y[i]


class Recorder(PyTorchCallback):
    """Records every hook call as (name, args...)."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log
        self.loaded: Any = None

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        self.log.append(("on_trial_startup", first_batch_idx))

    def on_trial_shutdown(self) -> None:
        self.log.append(("on_trial_shutdown",))

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        self.log.append(("on_checkpoint_load_start",))

    def load_state_dict(self, state_dict: Any) -> None:
        self.loaded = state_dict
        self.log.append(("load_state_dict",))

    def state_dict(self) -> Any:
        self.log.append(("state_dict",))
        return {"calls": len(self.log)}

    def on_training_start(self) -> None:
        self.log.append(("on_training_start",))

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.log.append(("on_training_epoch_start", epoch_idx))

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.log.append(("on_training_epoch_end", epoch_idx))

    def on_training_workload_end(self, avg_metrics: Any, batch_metrics: Any) -> None:
        self.log.append(("on_training_workload_end", len(batch_metrics)))

    def on_validation_start(self) -> None:
        self.log.append(("on_validation_start",))

    def on_validation_epoch_start(self) -> None:
        self.log.append(("on_validation_epoch_start",))

    def on_validation_epoch_end(self, outputs: Any) -> None:
        self.log.append(("on_validation_epoch_end", len(outputs)))

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.log.append(("on_validation_end",))

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        self.log.append(("on_checkpoint_save_start",))

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        self.log.append(("on_checkpoint_end",))

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self.log.append(("on_checkpoint_write_end",))

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.log.append(("on_checkpoint_upload_end", uuid))


class MLPTrial(det_torch.PyTorchTrial):
    """Knobs come from hparams: ``n`` records, ``batch_size``, ``lr``, ``dropout``,
    ``shuffle``, ``num_workers``, ``val_n``; ``events`` (a list) receives train_batch calls."""

    def __init__(self, context: PyTorchTrialContext, events: list[Any] | None = None) -> None:
        self.context = context
        hp = context.get_hparams()
        self.hp = hp
        self.events = events if events is not None else []
        self.train_set = Regression(hp.get("n", 40), seed=0)
        self.val_set = Regression(hp.get("val_n", 12), seed=1)
        model = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Dropout(hp.get("dropout", 0.0)), torch.nn.Linear(8, 1)
        )
        self.model = context.wrap_model(model)
        sgd = torch.optim.SGD(self.model.parameters(), lr=hp.get("lr", 0.01))
        self.opt = context.wrap_optimizer(sgd)

    def build_training_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(
            self.train_set,
            batch_size=self.hp.get("batch_size", 4),
            shuffle=self.hp.get("shuffle", False),
            num_workers=self.hp.get("num_workers", 0),
        )

    def build_validation_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(self.val_set, batch_size=4)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.events.append((epoch_idx, batch_idx))
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x).squeeze(-1), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"val_loss": torch.nn.functional.mse_loss(self.model(x).squeeze(-1), y)}

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        log = self.hp.get("callback_log")
        return {"rec": Recorder(log)} if log is not None else {}


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


class Capture(PyTorchCallback):
    """Keeps what the loop reports: training (avg, batch metrics), validation metrics, uuids."""

    def __init__(self) -> None:
        self.training: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        self.validation: list[dict[str, Any]] = []
        self.uuids: list[str] = []

    def on_training_workload_end(self, avg_metrics: Any, batch_metrics: Any) -> None:
        self.training.append((avg_metrics, batch_metrics))

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.validation.append(metrics)

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.uuids.append(uuid)


def run_local(
    trial_cls: type = MLPTrial,
    hparams: dict[str, Any] | None = None,
    exp_conf: dict[str, Any] | None = None,
    **fit: Any,
) -> tuple[Any, Capture, list[tuple[Any, ...]]]:
    """Train ``trial_cls`` locally with a Recorder and a Capture callback attached."""
    log: list[tuple[Any, ...]] = []
    capture = Capture()
    hp = {**(hparams or {}), "callback_log": log}
    with det_torch.init(hparams=hp, exp_conf=exp_conf) as ctx:
        trial = trial_cls(ctx)
        original = trial.build_callbacks

        def callbacks() -> dict[str, PyTorchCallback]:
            return {**original(), "capture": capture}

        trial.build_callbacks = callbacks
        fit.setdefault("max_length", det_torch.Batch(10))
        trial.reason = det_torch.Trainer(trial, ctx).fit(**fit)
    return trial, capture, log


def ckpt_dir(uuid: str) -> Any:
    from determined.common import _paths

    return _paths.default_checkpoint_dir() / uuid
