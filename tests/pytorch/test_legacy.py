"""Checkpoints written by Determined 0.37 itself and other old layouts
(docs/reference/harness.md §13 _load, §16)."""

from __future__ import annotations

import json
import pathlib
import pickle
import random
import sys
import types
from typing import Any

import numpy as np
import pytest
import torch
from _kit.pytorch_trials import MLPTrial, params

import determined.pytorch as det_torch
from determined.pytorch import _legacy, _state


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.0), torch.nn.Linear(8, 1))


def _determined_trial_state(trial_id: int, batches: int) -> bytes:
    """A pickle as Determined 0.37 writes trial_state.pkl (class from its module path)."""
    module = types.ModuleType("determined.pytorch._pytorch_trial")

    class _TrialState:
        pass

    _TrialState.__module__ = module.__name__
    _TrialState.__qualname__ = "_TrialState"
    module._TrialState = _TrialState  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        state = _TrialState()
        state.__dict__.update(
            trial_id=trial_id,
            last_ckpt=batches,
            step_id=batches,
            last_val=batches,
            batches_trained=batches,
            epochs_trained=0,
        )
        return pickle.dumps(state)
    finally:
        del sys.modules[module.__name__]


def _write_determined_checkpoint(
    path: pathlib.Path, model_state: dict[str, Any], **extra: Any
) -> None:
    path.mkdir(parents=True)
    rng = {
        "cpu_rng_state": torch.get_rng_state(),
        "np_rng_state": np.random.get_state(),  # a raw ndarray inside, as 0.37 saves it
        "random_rng_state": random.getstate(),
    }
    torch.save(
        {"models_state_dict": [model_state], "rng_state": rng, **extra}, path / "state_dict.pth"
    )
    (path / "trial_state.pkl").write_bytes(_determined_trial_state(3, 8))
    (path / "load_data.json").write_text(
        json.dumps(
            {
                "trial_type": "PyTorchTrial",
                "hparams": {"lr": 0.1},
                "experiment_config": {},
                "trial_cls_spec": "gone:Trial",
                "is_trainer": True,
            }
        )
    )


def test_determined_checkpoint_loads_under_weights_only(tmp_path: pathlib.Path) -> None:
    """§16 + issue: a 0.37 checkpoint (numpy RNG state as an ndarray, which torch >= 2.6's
    weights_only refuses by default) loads; trial_state.pkl is read without running code."""
    torch.manual_seed(1)
    source = _model()
    path = tmp_path / "ckpt"
    _write_determined_checkpoint(path, source.state_dict())
    with pytest.raises(Exception, match="weights_only|Unsupported"):
        torch.load(path / "state_dict.pth")  # the plain default fails, as 0.37 does
    loaded = det_torch.load_trial_from_checkpoint_path(path, trial_class=MLPTrial)
    for a, b in zip(params(source), params(loaded.model), strict=True):
        assert torch.equal(a, b)
    progress = _state.read_progress(path)
    assert progress is not None and (progress.trial_id, progress.batches_trained) == (3, 8)
    state = _legacy.torch_load(path / "state_dict.pth")
    _state.set_rng_state(state["rng_state"])  # the numpy state is accepted as saved


def test_ddp_prefixed_and_plain_state_dicts_load_into_each_other(tmp_path: pathlib.Path) -> None:
    """§19 item 60: DDP (`module.`) and plain state dicts load into each other."""
    source = _model()
    prefixed = {"module." + k: v for k, v in source.state_dict().items()}
    path = tmp_path / "ckpt"
    _write_determined_checkpoint(path, prefixed)
    loaded = det_torch.load_trial_from_checkpoint_path(path, trial_class=MLPTrial)
    for a, b in zip(params(source), params(loaded.model), strict=True):
        assert torch.equal(a, b)

    class Wrapper(torch.nn.Module):  # a DDP-shaped module: parameters under .module
        def __init__(self) -> None:
            super().__init__()
            self.module = _model()

    target = Wrapper()
    _legacy.load_model_state(target, source.state_dict())
    for a, b in zip(params(source), params(target.module), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(RuntimeError):
        _legacy.load_model_state(_model(), {"nope": torch.zeros(1)})


def test_legacy_single_keys(tmp_path: pathlib.Path) -> None:
    """§19 item 61: a legacy model_state_dict loads; legacy and new keys together raise."""
    source = _model()
    path = tmp_path / "legacy"
    path.mkdir()
    torch.save({"model_state_dict": source.state_dict()}, path / "state_dict.pth")
    (path / "load_data.json").write_text(json.dumps({"trial_cls_spec": "x:Y", "hparams": {}}))
    loaded = det_torch.load_trial_from_checkpoint_path(path, trial_class=MLPTrial)
    for a, b in zip(params(source), params(loaded.model), strict=True):
        assert torch.equal(a, b)
    both = {"model_state_dict": {}, "models_state_dict": [{}]}
    with pytest.raises(RuntimeError, match="both"):
        _legacy.normalize_state(both, 1)
    with pytest.raises(RuntimeError, match="2 models"):
        _legacy.normalize_state({"model_state_dict": {}}, 2)


def test_legacy_state_file_locations(tmp_path: pathlib.Path) -> None:
    """§13 _load: the state file is found under its old names, first match wins."""
    (tmp_path / "determined").mkdir()
    torch.save({}, tmp_path / "determined" / "state_dict.pth")
    torch.save({}, tmp_path / "checkpoint.pt")
    assert _legacy.find_state_file(tmp_path) == tmp_path / "determined" / "state_dict.pth"


def test_unknown_pickled_classes_are_refused(tmp_path: pathlib.Path) -> None:
    """A trial_state.pkl naming anything but Determined's state classes is refused."""
    (tmp_path / "trial_state.pkl").write_bytes(pickle.dumps(pathlib.Path("x")))
    with pytest.raises(pickle.UnpicklingError):
        _state.read_progress(tmp_path)


def test_missing_state_file_raises_named_error(tmp_path: pathlib.Path) -> None:
    """Deviation (Q3): a checkpoint without a state file fails loudly, naming the path."""
    from determined import errors
    from determined.pytorch import _checkpoint_io

    with pytest.raises(errors.CheckpointNotFound, match=str(tmp_path)):
        _checkpoint_io.load_state(tmp_path)


class CompiledTrial(MLPTrial):
    """Wraps a model that went through torch.compile first (eager backend: no compiler)."""

    def __init__(self, context: Any) -> None:
        self.context = context
        model = torch.compile(_model(), backend="eager")
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        self.hp, self.events = context.get_hparams(), []
        from _kit.pytorch_trials import Regression

        self.train_set, self.val_set = Regression(), Regression(12, seed=1)


def test_compiled_model_trains_and_loads_into_a_plain_one() -> None:
    """§10: a model wrapped after torch.compile trains and checkpoints; its `_orig_mod.` keys
    load into an uncompiled model (and the reverse)."""
    from _kit.pytorch_trials import ckpt_dir, run_local

    trial, cap, _ = run_local(CompiledTrial, max_length=det_torch.Batch(3))
    assert trial.events == [(0, 0), (0, 1), (0, 2)]
    path = ckpt_dir(cap.uuids[-1])
    saved = torch.load(path / "state_dict.pth", weights_only=True)["models_state_dict"][0]
    assert all(k.startswith("_orig_mod.") for k in saved)
    plain = det_torch.load_trial_from_checkpoint_path(path, trial_class=MLPTrial)
    # As in 0.37, a loaded trial's models stay where the trial put them (the CPU), while the
    # trained one is on the GPU where there is one.
    for a, b in zip(params(trial.model), params(plain.model), strict=True):
        assert torch.equal(a.cpu(), b)
    compiled = torch.compile(_model(), backend="eager")
    _legacy.load_model_state(compiled, plain.model.state_dict())
    for a, b in zip(params(trial.model), params(compiled), strict=True):
        assert torch.equal(a.cpu(), b)


def _as_saved_on_cuda(blob: bytes) -> bytes:
    """Rewrite a torch.save archive so its storages say they live on cuda:0, as a checkpoint
    written on a GPU machine does (only the location strings in data.pkl change)."""
    import io
    import pickletools
    import zipfile

    src, out = zipfile.ZipFile(io.BytesIO(blob)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                ops = list(pickletools.genops(data))
                chunks = []
                for i, (op, arg, pos) in enumerate(ops):
                    end = ops[i + 1][2] if i + 1 < len(ops) else len(data)
                    if op.name in ("BINUNICODE", "SHORT_BINUNICODE") and arg == "cpu":
                        chunks.append(b"X" + (6).to_bytes(4, "little") + b"cuda:0")
                    else:
                        chunks.append(data[pos:end])
                data = b"".join(chunks)
            dst.writestr(info, data)
    return out.getvalue()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only machine")
def test_cuda_checkpoint_loads_on_a_cpu_only_machine(tmp_path: pathlib.Path) -> None:
    """Issue item 7: CUDA tensors in a Determined checkpoint load on a CPU-only machine."""
    source = _model()
    path = tmp_path / "gpu"
    _write_determined_checkpoint(path, source.state_dict())
    file = path / "state_dict.pth"
    file.write_bytes(_as_saved_on_cuda(file.read_bytes()))
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.load(file, weights_only=False)  # what torch does without a map_location
    loaded = det_torch.load_trial_from_checkpoint_path(path, trial_class=MLPTrial)
    for a, b in zip(params(source), params(loaded.model), strict=True):
        assert torch.equal(a, b)
