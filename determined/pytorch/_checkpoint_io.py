"""Saving and restoring everything a ``PyTorchTrial`` registered, in the layout described in
``_state.py``. Old layouts are translated by ``_legacy``; nothing else knows about them."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import torch

from determined import errors
from determined.pytorch import _legacy, _state
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._context import _TrainingSetup

logger = logging.getLogger("determined.pytorch")


def build_state_dict(
    setup: _TrainingSetup, callbacks: dict[str, PyTorchCallback]
) -> dict[str, Any]:
    state: dict[str, Any] = {
        "models_state_dict": [m.state_dict() for m in setup.models],
        "optimizers_state_dict": [o.state_dict() for o in setup.optimizers],
        "lr_schedulers_state_dict": [s.state_dict() for s in setup.lr_schedulers],
        "callbacks": {name: cb.state_dict() for name, cb in callbacks.items()},
        "rng_state": _state.rng_state(),
    }
    if setup.scaler is not None:
        state["scaler_state_dict"] = setup.scaler.state_dict()
    return state


def write_chief_files(
    path: pathlib.Path,
    setup: _TrainingSetup,
    callbacks: dict[str, PyTorchCallback],
    progress: _state.Progress,
    settings: Any,
) -> None:
    """Everything but the per-rank files, with the chief's checkpoint hooks in order."""
    state = build_state_dict(setup, callbacks)
    for cb in callbacks.values():
        cb.on_checkpoint_save_start(state)
    torch.save(state, path / "state_dict.pth")
    _state.write_json(path / "trial_state.json", progress.state_dict())
    _state.write_json(path / "load_data.json", settings.load_data)
    if settings.code_dir is not None:
        dst = path / "code" / settings.code_subdir
        _state.copy_code(settings.code_dir, dst, exclude=path.parent)
    for cb in callbacks.values():
        cb.on_checkpoint_end(str(path))
        cb.on_checkpoint_write_end(str(path))


def write_rank_files(path: pathlib.Path, rank: int) -> None:
    """Every rank's own RNG state (the chief's is also in state_dict.pth)."""
    file = _state.rank_rng_file(path, rank)
    file.parent.mkdir(parents=True, exist_ok=True)
    torch.save(_state.rng_state(), file)


def load_state(path: pathlib.Path, **torch_load_kwargs: Any) -> dict[str, Any]:
    """Read a checkpoint's state dict. Raises ``CheckpointNotFound``-style errors loudly."""
    file = _legacy.find_state_file(path)
    if file is None:
        raise errors.CheckpointNotFound(
            f"no state file ({', '.join(_legacy.STATE_FILES)}) in checkpoint {path}"
        )
    try:
        state = _legacy.torch_load(file, **torch_load_kwargs)
    except Exception as e:
        raise errors.CheckpointCorrupted(
            f"cannot load {file}: {e}. If it holds custom objects you trust, pass "
            "torch_load_kwargs={'weights_only': False}",
            path=str(file),
        ) from e
    if not isinstance(state, dict):
        raise errors.CheckpointCorrupted(f"{file} does not hold a dict", path=str(file))
    return state


def restore_models(models: list[torch.nn.Module], state: dict[str, Any]) -> None:
    state = _legacy.normalize_state(state, len(models))
    for model, sd in zip(models, state.get("models_state_dict", []), strict=False):
        _legacy.load_model_state(model, sd)


def restore(
    path: pathlib.Path,
    setup: _TrainingSetup,
    callbacks: dict[str, PyTorchCallback],
    *,
    weights_only: bool,
) -> dict[str, Any] | None:
    """Restore a checkpoint into a constructed trial on this rank. ``weights_only`` (a resume
    from another trial) restores model weights only.

    Returns this rank's saved RNG state (None if there is none) without applying it: the
    caller sets it with ``_state.set_rng_state`` once the training iterator is built, because
    building one can draw from the global torch RNG."""
    state = load_state(path)
    for cb in callbacks.values():
        cb.on_checkpoint_load_start(state)
    state = _legacy.normalize_state(state, len(setup.models))
    restore_models(setup.models, state)
    if weights_only:
        return None
    for opt, sd in zip(setup.optimizers, state.get("optimizers_state_dict", []), strict=False):
        opt.load_state_dict(sd)
    for sched, sd in zip(
        setup.lr_schedulers, state.get("lr_schedulers_state_dict", []), strict=False
    ):
        sched.load_state_dict(sd)
    if setup.scaler is not None and "scaler_state_dict" in state:
        setup.scaler.load_state_dict(state["scaler_state_dict"])
    for name, sd in state.get("callbacks", {}).items():
        if name in callbacks:
            callbacks[name].load_state_dict(sd)
        else:
            logger.warning(f"checkpoint has state for callback {name!r}, which is not built")
    return _saved_rng(path, setup.core.distributed.get_rank(), state)


def _saved_rng(path: pathlib.Path, rank: int, state: dict[str, Any]) -> dict[str, Any] | None:
    own = _state.rank_rng_file(path, rank)
    if own.is_file():
        return dict(_legacy.torch_load(own))
    return state.get("rng_state")
