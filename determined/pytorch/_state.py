"""The training loop's state and its checkpoint files.

Layout written by the chief (plus one RNG file per rank)::

    state_dict.pth       torch.save: models/optimizers/lr_schedulers state lists, callbacks,
                         scaler_state_dict, rng_state (the chief's)
    trial_state.json     Progress as JSON with a format version (not a pickle)
    rng_state/rank-N.pth every rank's python/numpy/torch/cuda RNG state
    load_data.json       how to rebuild the trial (trial_cls_spec, hparams, experiment_config)
    code/                the model definition directory
    metadata.json        written by core's store_path
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import random
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from determined.common._detignore import Ignore
from determined.pytorch import _legacy

logger = logging.getLogger("determined.pytorch")

FORMAT_VERSION = 1
CODE_LIMIT_BYTES = 16 * 1024 * 1024
CODE_LIMIT_FILES = 1000
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", "checkpoints", "runs"}


@dataclasses.dataclass
class Progress:
    """Counters the loop owns. ``batches_trained`` is per rank and equals steps_completed.
    ``data_seed`` seeds the data order and the loader workers' random numbers (see
    ``_sample_seed``): chosen once per run, kept so that a resumed run sees the same data."""

    trial_id: int = 0
    batches_trained: int = 0
    epochs_trained: int = 0
    last_ckpt: int | None = None
    last_val: int | None = None
    data_seed: int | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Progress:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in fields})


def rng_state() -> dict[str, Any]:
    name, key, pos, has_gauss, cached = np.random.get_state()
    # The key as a tensor: torch's weights_only loader refuses raw numpy arrays.
    np_state = (name, torch.from_numpy(np.asarray(key, dtype=np.int64)), pos, has_gauss, cached)
    state: dict[str, Any] = {
        "cpu_rng_state": torch.get_rng_state(),
        "np_rng_state": np_state,
        "random_rng_state": random.getstate(),
    }
    if torch.cuda.is_available():
        state["gpu_rng_state"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu_rng_state"])
    np.random.set_state(_legacy.numpy_rng_state(state["np_rng_state"]))
    version, internal, gauss = state["random_rng_state"]
    random.setstate((version, tuple(internal), gauss))
    gpu = state.get("gpu_rng_state")
    if gpu is not None and torch.cuda.is_available():
        if isinstance(gpu, torch.Tensor):
            gpu = [gpu]
        if len(gpu) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(gpu)


@contextlib.contextmanager
def rng_preserved() -> Iterator[None]:
    """Validation must not shift training's random streams (dropout, augmentation)."""
    saved = rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)


def copy_code(src: pathlib.Path, dst: pathlib.Path, exclude: pathlib.Path | None = None) -> None:
    """Copy the model definition directory: no hidden entries, caches, virtualenvs, the
    checkpoint store or ``.detignore`` matches, and at most ``CODE_LIMIT_FILES`` files /
    ``CODE_LIMIT_BYTES`` bytes (the rest is skipped with one warning)."""
    dst.mkdir(parents=True, exist_ok=True)
    ignore = Ignore.for_root(src)
    budget, files_left, skipped = CODE_LIMIT_BYTES, CODE_LIMIT_FILES, 0
    for root, dirs, files in os.walk(src):
        here = pathlib.Path(root)
        rel_dir = here.relative_to(src).as_posix()
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in _SKIP_DIRS
            and not d.startswith(".")
            and not ignore.match(f"{rel_dir}/{d}".removeprefix("./"), True)
            and (exclude is None or (here / d).resolve() != exclude.resolve())
        )
        for name in sorted(files):
            file = here / name
            rel = file.relative_to(src).as_posix()
            if name.startswith(".") or ignore.match(rel, False) or not file.is_file():
                continue
            size = file.stat().st_size
            if size > budget or files_left == 0:
                skipped += 1
                continue
            budget, files_left = budget - size, files_left - 1
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, dst / rel)
    if skipped:
        logger.warning(
            f"code/ holds at most {CODE_LIMIT_FILES} files and {CODE_LIMIT_BYTES} bytes: "
            f"skipped {skipped} files of {src}; list what to leave out in {src}/.detignore"
        )


def write_json(path: pathlib.Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))


def read_progress(path: pathlib.Path) -> Progress | None:
    file = path / "trial_state.json"
    if file.is_file():
        return Progress.from_state_dict(json.loads(file.read_text()))
    legacy = _legacy.read_pickled_trial_state(path)
    return None if legacy is None else Progress.from_state_dict(legacy)


def rank_rng_file(path: pathlib.Path, rank: int) -> pathlib.Path:
    return path / "rng_state" / f"rank-{rank}.pth"
