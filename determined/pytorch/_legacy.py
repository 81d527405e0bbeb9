"""Everything about checkpoints written by Determined itself (0.x) or by older layouts, in one
place. The rest of the package reads and writes only the current layout through
:func:`normalize_state` and :func:`torch_load`.

Current layout of ``state_dict.pth``: ``models_state_dict``, ``optimizers_state_dict`` and
``lr_schedulers_state_dict`` (lists in wrap order), ``callbacks``, optional
``scaler_state_dict``, and ``rng_state``.
"""

from __future__ import annotations

import pathlib
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

# Where the state file has lived, first match wins.
STATE_FILES = (
    "state_dict.pth",
    "determined/state_dict.pth",
    "pedl/state_dict.pth",
    "checkpoint.pt",
)

# Old single-object keys -> current list keys. Old and new together are ambiguous.
LEGACY_KEYS = {
    "model_state_dict": "models_state_dict",
    "optimizer_state_dict": "optimizers_state_dict",
    "lr_scheduler": "lr_schedulers_state_dict",
}

# Globals a Determined-written state_dict.pth needs beyond torch's weights_only defaults: the
# numpy RNG state (`np.random.get_state()`) was saved as a raw ndarray, which torch >= 2.6
# refuses by default (Determined 0.37 itself fails to load it there). torch matches a global by
# the name written in the pickle, and numpy 1 wrote `numpy.core.multiarray._reconstruct` where
# numpy 2 writes `numpy._core...`: both names are allowed, whichever numpy is installed.
_RECONSTRUCT_NAMES = ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct")
_NUMPY_GLOBALS: list[Any] = [np.ndarray, np.dtype, np.dtypes.UInt32DType] + [
    (np.ndarray.__reduce__(np.zeros(0))[0], name) for name in _RECONSTRUCT_NAMES
]


def load_data_from_metadata(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """Determined 0.13.x-0.17.6 wrote no ``load_data.json``; ``Checkpoint.download()`` wrote a
    ``metadata.json`` whose ``experiment_config.entrypoint`` (always ``module:Class`` then)
    names the trial. Returns the equivalent load data, or None if ``metadata`` has neither."""
    if "trial_cls_spec" in metadata:
        return metadata
    config = metadata.get("experiment_config")
    entrypoint = config.get("entrypoint") if isinstance(config, dict) else None
    if not isinstance(entrypoint, str) or ":" not in entrypoint:
        return None
    return {
        "trial_type": "PyTorchTrial",
        "experiment_config": config,
        "hparams": metadata.get("hparams"),
        "trial_cls_spec": entrypoint,
    }


def model_from_build_model(trial: Any, state: dict[str, Any]) -> torch.nn.Module | None:
    """Trials written before Determined 0.13 built their one model in ``build_model()``; their
    checkpoints load into that bare module, which is returned instead of the trial, as 0.37
    does. None when the trial has no ``build_model``."""
    build_model = getattr(trial, "build_model", None)
    if not callable(build_model):
        return None
    model = build_model()
    load_model_state(model, normalize_state(state, 1)["models_state_dict"][0])
    return model


def find_state_file(path: pathlib.Path) -> pathlib.Path | None:
    for name in STATE_FILES:
        if (path / name).is_file():
            return path / name
    return None


def torch_load(file: pathlib.Path, **kwargs: Any) -> Any:
    """``torch.load`` with ``weights_only=True`` and the numpy globals old checkpoints need;
    CUDA tensors land on the CPU when CUDA is unavailable."""
    if not torch.cuda.is_available():
        kwargs.setdefault("map_location", "cpu")
    kwargs.setdefault("weights_only", True)
    with torch.serialization.safe_globals(_NUMPY_GLOBALS):
        return torch.load(file, **kwargs)


def normalize_state(state: dict[str, Any], n_models: int) -> dict[str, Any]:
    """Rewrite legacy single-object keys into the current list keys."""
    state = dict(state)
    for old, new in LEGACY_KEYS.items():
        if old not in state:
            continue
        if new in state:
            raise RuntimeError(
                f"checkpoint has both the legacy key {old!r} and {new!r}; it is ambiguous"
            )
        if n_models != 1:
            raise RuntimeError(
                f"checkpoint uses the legacy key {old!r}, which holds one object, but the trial "
                f"wrapped {n_models} models"
            )
        state[new] = [state.pop(old)]
    return state


# Prefixes wrappers add to parameter names: DDP ("module.") and torch.compile ("_orig_mod.").
# A checkpoint from a wrapped model loads into a plain one and vice versa.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def _canonical(key: str) -> str:
    stripped = True
    while stripped:
        stripped = False
        for prefix in WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, stripped = key[len(prefix) :], True
    return key


def load_model_state(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Load ``state``; if the keys do not match, retry with wrapper prefixes
    (``WRAPPER_PREFIXES``) renamed to the model's own."""
    try:
        model.load_state_dict(state)
        return
    except RuntimeError as first:
        own = {_canonical(k): k for k in model.state_dict()}
        renamed = {own.get(_canonical(k), k): v for k, v in state.items()}
        try:
            model.load_state_dict(renamed)
        except RuntimeError:
            raise first from None


def numpy_rng_state(saved: Any) -> tuple[Any, ...]:
    """Determined saves ``np.random.get_state()`` as is; we save the key as a tensor."""
    name, key, pos, has_gauss, cached = saved
    if isinstance(key, torch.Tensor):
        key = key.numpy().astype(np.uint32)
    return (name, np.asarray(key, dtype=np.uint32), int(pos), int(has_gauss), float(cached))


class _StateStandIn:
    """Receives the attributes of a pickled Determined ``_TrialState``."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class _TrialStateUnpickler(pickle.Unpickler):
    # Only Determined's trial-state classes may be rebuilt, as plain attribute bags.
    _ALLOWED = {"_TrialState", "_WorkloadSequencerState", "WorkloadSequencerState"}

    def find_class(self, module: str, name: str) -> Callable[..., Any]:
        if module.startswith("determined.") and name in self._ALLOWED:
            return _StateStandIn
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a trial state")


# Determined's pickled trial state -> our progress fields.
TRIAL_STATE_FIELDS = {
    "trial_id": "trial_id",
    "last_ckpt": "last_ckpt",
    "last_val": "last_val",
    "step_id": "batches_trained",
    "batches_trained": "batches_trained",
    "epochs_trained": "epochs_trained",
}


def read_pickled_trial_state(path: pathlib.Path) -> dict[str, Any] | None:
    """Determined's ``trial_state.pkl`` (or legacy ``workload_sequencer.pkl``) as a dict of
    our progress fields; None when neither exists."""
    for name in ("trial_state.pkl", "workload_sequencer.pkl"):
        file = path / name
        if file.is_file():
            with file.open("rb") as f:
                obj = _TrialStateUnpickler(f).load()
            attrs = obj.__dict__ if isinstance(obj, _StateStandIn) else dict(obj)
            return {new: attrs[old] for old, new in TRIAL_STATE_FIELDS.items() if old in attrs}
    return None
