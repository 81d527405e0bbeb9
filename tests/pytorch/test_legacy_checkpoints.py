"""Checkpoints written by Determined 0.13.x-0.17.6 and 0.17.7-0.21.0 load with
``load_trial_from_checkpoint_path`` and resume with ``Trainer.fit(latest_checkpoint=...)``,
their numpy arrays pickled by numpy 1 (docs/reference/harness.md §16;
docs/pytorch.md, "Checkpoints")."""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import zipfile
from typing import Any

import numpy as np
import pytest
import torch
from _kit import legacy_checkpoints as legacy

import determined.pytorch as det_torch
from determined.common import _paths
from determined.pytorch import Batch, PyTorchCallback


def _pickled_names(file: pathlib.Path) -> bytes:
    with zipfile.ZipFile(file) as z:
        return b"".join(z.read(n) for n in z.namelist() if n.endswith("data.pkl"))


def test_fixtures_are_pickled_as_numpy_1_wrote_them(tmp_path: pathlib.Path) -> None:
    legacy.write_0_21(tmp_path / "ckpt", batches_trained=4)
    names = _pickled_names(tmp_path / "ckpt" / "state_dict.pth")
    assert b"numpy.core.multiarray\n_reconstruct" in names
    assert b"numpy._core" not in names


def test_0_16_checkpoint_finds_its_trial_through_metadata_entrypoint(
    tmp_path: pathlib.Path,
) -> None:
    """0.13.x-0.17.6: no load_data.json; the class comes from metadata.json's
    experiment_config.entrypoint, hparams from metadata.json, weights from the models list."""
    path = tmp_path / "ckpt"
    saved = legacy.write_0_16(path)
    trial: Any = det_torch.load_trial_from_checkpoint_path(path)
    assert type(trial).__name__ == "WrappedTrial"
    assert trial.context.get_hparams() == legacy.HPARAMS
    for got, want in zip(trial.model.parameters(), saved.parameters(), strict=True):
        assert torch.equal(got, want)


def test_pre_0_13_build_model_checkpoint_returns_the_bare_module(tmp_path: pathlib.Path) -> None:
    """A build_model() trial's checkpoint (one model_state_dict) gives back the bare model
    built by build_model() with the weights loaded, as 0.37 does."""
    path = tmp_path / "ckpt"
    saved = legacy.write_0_16(path, style="build_model")
    model = det_torch.load_trial_from_checkpoint_path(path)
    assert isinstance(model, torch.nn.Linear)
    assert torch.equal(model.weight, saved.weight) and torch.equal(model.bias, saved.bias)


def test_0_21_harness_checkpoint_loads(tmp_path: pathlib.Path) -> None:
    """0.17.7-0.21.0: load_data.json without is_trainer; the deprecated **kwargs still reach
    torch.load (with a FutureWarning), and clashing with torch_load_kwargs is a ValueError."""
    path = tmp_path / "ckpt"
    saved = legacy.write_0_21(path, batches_trained=4)
    with pytest.warns(FutureWarning, match="torch_load_kwargs"):
        trial: Any = det_torch.load_trial_from_checkpoint_path(path, map_location="cpu")
    assert torch.equal(trial.model.weight, saved["model"].weight)
    with pytest.raises(ValueError, match="torch_load_kwargs"):
        det_torch.load_trial_from_checkpoint_path(
            path, torch_load_kwargs={"map_location": "cpu"}, map_location="cpu"
        )


def test_no_metadata_is_an_assertion_error_naming_download(tmp_path: pathlib.Path) -> None:
    """As in 0.37: neither load_data.json nor a usable metadata.json -> AssertionError."""
    (tmp_path / "state_dict.pth").write_bytes(b"")
    with pytest.raises(AssertionError, match="Checkpoint.download"):
        det_torch.load_trial_from_checkpoint_path(tmp_path)


class _AtStart(PyTorchCallback):
    """What the restored trial holds when training starts."""

    def __init__(self, trial: Any) -> None:
        self.trial = trial
        self.seen: dict[str, Any] = {}

    def on_training_start(self) -> None:
        self.seen = {
            "weight": self.trial.model.weight.detach().clone(),
            "momentum": self.trial.opt.state_dict()["state"][0]["momentum_buffer"].clone(),
            "np_state": np.random.get_state(),
        }


def test_trainer_resumes_from_a_0_21_checkpoint_under_numpy_2(tmp_path: pathlib.Path) -> None:
    """fit(latest_checkpoint=...) from a 0.21 checkpoint (numpy 1 pickles, a pickled
    _TrialState) restores weights, optimizer state, the numpy RNG and the batch counter, and
    trains on from there."""
    uuid = "legacy-0-21"
    path = _paths.default_checkpoint_dir() / uuid
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = legacy.write_0_21(tmp_path / "ckpt", batches_trained=4)
    shutil.copytree(tmp_path / "ckpt", path)
    spec = importlib.util.spec_from_file_location(
        "legacy_model_def", path / "code" / "legacy_model_def.py"
    )
    assert spec is not None and spec.loader is not None
    legacy_model_def = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(legacy_model_def)

    events: list[int] = []
    with det_torch.init(hparams=legacy.HPARAMS) as ctx:
        trial = legacy_model_def.WrappedTrial(ctx)
        start = _AtStart(trial)
        trial.build_callbacks = lambda: {"start": start}
        original = trial.train_batch

        def train_batch(batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            events.append(batch_idx)
            return original(batch, epoch_idx, batch_idx)

        trial.train_batch = train_batch
        det_torch.Trainer(trial, ctx).fit(max_length=Batch(6), latest_checkpoint=uuid)
    assert events == [4, 5]
    assert torch.equal(start.seen["weight"], saved["model"].weight)
    want_momentum = saved["opt"].state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(start.seen["momentum"], want_momentum)
    assert np.array_equal(start.seen["np_state"][1], saved["rng"]["np_rng_state"][1])
