"""Checkpoint directories in the layouts older Determined releases wrote, for
tests/pytorch/test_legacy_checkpoints.py.

- ``write_0_16``: Determined 0.13.x to 0.17.6. No ``load_data.json``: ``metadata.json`` (as
  ``Checkpoint.download()`` wrote it) names the trial in ``experiment_config.entrypoint``.
  ``style="build_model"`` is the pre-0.13 trial API (the model comes from ``build_model()`` and
  the state file holds one ``model_state_dict``).
- ``write_0_21``: Determined 0.17.7 to 0.21.0 under the harness: ``load_data.json`` without
  ``is_trainer``, ``state_dict.pth`` with the RNG state, and a pickled ``_TrialState`` object in
  ``trial_state.pkl``.

Both are written as numpy 1 wrote them: the pickled names are rewritten to numpy 1's
``numpy.core.multiarray`` (numpy 2 writes ``numpy._core``), whatever numpy runs the tests.
The layouts were checked against Determined 0.37.0's own loader and writer.
"""

from __future__ import annotations

import io
import json
import pathlib
import pickle
import random
import zipfile
from typing import Any

import numpy as np
import torch

MODEL_DEF = """
import torch
from determined import pytorch


class WrappedTrial(pytorch.PyTorchTrial):
    '''0.13 and later: models are registered with wrap_model().'''

    def __init__(self, context):
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(4, 1))
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"), momentum=0.9)
        )

    def _loader(self):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(32, 4, generator=g)
        ds = torch.utils.data.TensorDataset(x, x.sum(-1, keepdim=True))
        return pytorch.DataLoader(ds, batch_size=4)

    def build_training_data_loader(self):
        return self._loader()

    def build_validation_data_loader(self):
        return self._loader()

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        return {"val_loss": torch.nn.functional.mse_loss(self.model(x), y)}


class BuildModelTrial(pytorch.PyTorchTrial):
    '''Before 0.13: the harness called build_model() and passed the model to train_batch.'''

    def __init__(self, context):
        self.context = context

    def build_model(self):
        return torch.nn.Linear(4, 1)

    def build_training_data_loader(self):
        raise NotImplementedError

    def build_validation_data_loader(self):
        raise NotImplementedError

    def train_batch(self, batch, model, epoch_idx, batch_idx):
        raise NotImplementedError

    def evaluate_batch(self, batch, model):
        raise NotImplementedError
"""

HPARAMS = {"lr": 0.05, "global_batch_size": 4}


def _numpy_1_pickles(file: pathlib.Path) -> None:
    """Rewrite numpy 2's pickled module names to numpy 1's in a torch zip file (protocol 2
    writes globals as newline-terminated text, so the rename keeps the pickle valid)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(file) as zin, zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
            zout.writestr(info, data)
    file.write_bytes(buffer.getvalue())


def _rng_state() -> dict[str, Any]:
    return {
        "cpu_rng_state": torch.random.get_rng_state(),
        "np_rng_state": np.random.get_state(),
        "random_rng_state": random.getstate(),
    }


def trained_linear(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A Linear(4, 1) and its momentum SGD after two steps: state worth restoring."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=HPARAMS["lr"], momentum=0.9)
    for _ in range(2):
        model(torch.randn(4, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _code(path: pathlib.Path) -> None:
    (path / "code").mkdir(parents=True)
    (path / "code" / "legacy_model_def.py").write_text(MODEL_DEF)


def write_0_16(path: pathlib.Path, style: str = "wrap_model") -> torch.nn.Module:
    """A 0.13.x-0.17.6 checkpoint of ``WrappedTrial`` (or ``BuildModelTrial`` with
    ``style="build_model"``); returns the model whose weights it holds."""
    model, opt = trained_linear()
    _code(path)
    if style == "build_model":
        state: dict[str, Any] = {"model_state_dict": model.state_dict()}
        entrypoint = "legacy_model_def:BuildModelTrial"
    else:
        state = {
            "models_state_dict": [model.state_dict()],
            "optimizers_state_dict": [opt.state_dict()],
            "lr_schedulers_state_dict": [],
            "callbacks": {},
            "rng_state": _rng_state(),
        }
        entrypoint = "legacy_model_def:WrappedTrial"
    torch.save(state, path / "state_dict.pth")
    _numpy_1_pickles(path / "state_dict.pth")
    metadata = {
        "determined_version": "0.16.4",
        "torch_version": "1.9.0",  # the older metadata layout, before "framework"
        "experiment_config": {"entrypoint": entrypoint, "hyperparameters": {}},
        "hparams": HPARAMS,
    }
    (path / "metadata.json").write_text(json.dumps(metadata))
    return model


class _TrialState:
    """Pickled under Determined's name (``determined.pytorch._pytorch_trial._TrialState``)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def _pickled_trial_state(**fields: Any) -> bytes:
    data = pickle.dumps(_TrialState(**fields), protocol=2)
    ours = f"c{_TrialState.__module__}\n_TrialState\n".encode()
    assert ours in data
    return data.replace(ours, b"cdetermined.pytorch._pytorch_trial\n_TrialState\n")


def write_0_21(path: pathlib.Path, batches_trained: int, trial_id: int = 0) -> dict[str, Any]:
    """A 0.17.7-0.21.0 harness checkpoint of ``WrappedTrial`` after ``batches_trained``
    batches; returns what it holds (``model``, ``opt`` and the global RNG ``rng`` saved)."""
    model, opt = trained_linear()
    _code(path)
    np.random.seed(1234)  # the RNG state the checkpoint carries
    rng = _rng_state()
    torch.save(
        {
            "models_state_dict": [model.state_dict()],
            "optimizers_state_dict": [opt.state_dict()],
            "lr_schedulers_state_dict": [],
            "callbacks": {},
            "rng_state": rng,
        },
        path / "state_dict.pth",
    )
    _numpy_1_pickles(path / "state_dict.pth")
    load_data = {
        "trial_type": "PyTorchTrial",
        "experiment_config": {"entrypoint": "legacy_model_def:WrappedTrial"},
        "hparams": HPARAMS,
        "trial_cls_spec": "legacy_model_def:WrappedTrial",
    }
    (path / "load_data.json").write_text(json.dumps(load_data))
    (path / "trial_state.pkl").write_bytes(
        _pickled_trial_state(
            trial_id=trial_id,
            last_ckpt=batches_trained,
            step_id=0,
            last_val=batches_trained,
            batches_trained=batches_trained,
            epochs_trained=batches_trained // 8,
        )
    )
    return {"model": model, "opt": opt, "rng": rng}
