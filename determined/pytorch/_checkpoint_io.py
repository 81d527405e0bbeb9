"""Saving and restoring everything a ``PyTorchTrial`` registered, in the layout described in
``_state.py``. Old layouts are translated by ``_legacy``; nothing else knows about them."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import logging
import pathlib
import pickle
from collections.abc import Callable
from typing import IO, Any, cast

import torch

from determined import errors
from determined.common.storage import _manifest
from determined.pytorch import _legacy, _state
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._context import _TrainingSetup, is_fsdp
from determined.pytorch._staging import HostStaging, StagingTooLarge, host_copy, no_release

logger = logging.getLogger("determined.pytorch")


DCP_DIR = "dcp"  # sharded model and optimizer state: torch.distributed.checkpoint's layout


def is_sharded(setup: _TrainingSetup) -> bool:
    """Whether the trial's models are FSDP2 modules (``fully_shard``): their weights and
    optimizer state are then saved with torch.distributed.checkpoint, one file per rank."""
    return any(is_fsdp(m) for m in setup.models)


def _dcp_state(setup: _TrainingSetup, *, optimizers: bool = True) -> dict[str, Any]:
    from torch.distributed.checkpoint import state_dict as dsd

    models = torch.nn.ModuleList(setup.models)  # one namespace: "0.weight", "1.bias", ...
    state: dict[str, Any] = {"models": dsd.get_model_state_dict(models)}
    if optimizers and setup.optimizers:
        state["optimizers"] = dsd.get_optimizer_state_dict(models, setup.optimizers)
    return state


def write_sharded(path: pathlib.Path, setup: _TrainingSetup) -> None:
    """Every rank's shard of the models and optimizers into ``path/dcp`` (a collective over
    the default process group; rank 0 also writes DCP's ``.metadata``)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_dcp_state(setup), checkpoint_id=path / DCP_DIR)


def restore_sharded(path: pathlib.Path, setup: _TrainingSetup, *, weights_only: bool) -> None:
    """Load ``path/dcp`` into the trial's models (and optimizers), resharded to this run's
    layout: any world size, FSDP2 or plain modules. A collective when a process group is up."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import state_dict as dsd

    models = torch.nn.ModuleList(setup.models)
    state = _dcp_state(setup, optimizers=not weights_only)
    dcp.load(state, checkpoint_id=path / DCP_DIR)
    dsd.set_model_state_dict(models, state["models"])
    if "optimizers" in state:
        dsd.set_optimizer_state_dict(models, setup.optimizers, state["optimizers"])


def build_state_dict(
    setup: _TrainingSetup, callbacks: dict[str, PyTorchCallback]
) -> dict[str, Any]:
    """The chief's ``state_dict.pth``. With FSDP2 models, weights and optimizer state live in
    ``dcp/`` instead and the two lists are empty."""
    sharded = is_sharded(setup)
    state: dict[str, Any] = {
        "models_state_dict": [] if sharded else [m.state_dict() for m in setup.models],
        "optimizers_state_dict": [] if sharded else [o.state_dict() for o in setup.optimizers],
        "lr_schedulers_state_dict": [s.state_dict() for s in setup.lr_schedulers],
        "callbacks": {name: cb.state_dict() for name, cb in callbacks.items()},
        "rng_state": _state.rng_state(),
    }
    if setup.scaler is not None:
        state["scaler_state_dict"] = setup.scaler.state_dict()
    return state


@dataclasses.dataclass
class Staged:
    """Everything the chief writes into a checkpoint, taken at one instant. With ``to_host``
    the tensors are copies in host memory, so training may go on while it is written."""

    state: dict[str, Any]
    progress: dict[str, Any]
    load_data: dict[str, Any]
    code_dir: pathlib.Path | None
    code_subdir: str
    rank_rngs: list[dict[str, Any]] | None = None  # every rank's RNG state, by rank
    # Called once ``state`` has been written: kept staging buffers may then be reused.
    release: Callable[[], None] = no_release
    # Whether ``state`` is a host copy (False: the live state, which the caller must not change
    # until it has been written).
    on_host: bool = False


def stage(
    setup: _TrainingSetup,
    callbacks: dict[str, PyTorchCallback],
    progress: _state.Progress,
    settings: Any,
    *,
    to_host: bool = False,
    rank_rngs: list[dict[str, Any]] | None = None,
    staging: HostStaging | None = None,
) -> Staged:
    """Take the chief's checkpoint state (``on_checkpoint_save_start`` hooks run here, on the
    calling thread). ``to_host`` copies every tensor to host memory: the only part of an
    asynchronous checkpoint that blocks training; into ``staging``'s kept buffers if given
    (then released by :func:`write_staged`), else into new memory."""
    state = build_state_dict(setup, callbacks)
    for cb in callbacks.values():
        cb.on_checkpoint_save_start(state)
    load_data = settings.load_data
    release = no_release
    on_host = False
    if to_host:
        try:
            if staging is not None:
                state, release = staging.copy(state)
            else:
                state = host_copy(state)
            on_host = True
        except StagingTooLarge as e:
            logger.warning(
                f"{e}: this checkpoint is written from the live state, and training waits"
            )
        load_data = copy.deepcopy(load_data)
    return Staged(
        state=state,
        progress=progress.state_dict(),
        load_data=load_data,
        code_dir=settings.code_dir,
        code_subdir=settings.code_subdir,
        rank_rngs=host_copy(rank_rngs) if to_host and rank_rngs is not None else rank_rngs,
        release=release,
        on_host=on_host,
    )


def write_staged(path: pathlib.Path, staged: Staged, callbacks: dict[str, PyTorchCallback]) -> None:
    """Write a staged checkpoint's files, then run the chief's write-end hooks (on whatever
    thread calls this: the background writer for asynchronous checkpoints)."""
    try:
        save_file(staged.state, path / "state_dict.pth")
    finally:
        staged.release()  # the staged tensors are all in the file (or the write failed)
    _state.write_json(path / "trial_state.json", staged.progress)
    _state.write_json(path / "load_data.json", staged.load_data)
    for rank, rng in enumerate(staged.rank_rngs or []):
        write_rank_files(path, rank, rng)
    if staged.code_dir is not None:
        dst = path / "code" / staged.code_subdir
        _state.copy_code(staged.code_dir, dst, exclude=path.parent)
    for cb in callbacks.values():
        cb.on_checkpoint_end(str(path))
        cb.on_checkpoint_write_end(str(path))


def write_chief_files(
    path: pathlib.Path,
    setup: _TrainingSetup,
    callbacks: dict[str, PyTorchCallback],
    progress: _state.Progress,
    settings: Any,
) -> None:
    """Everything but the per-rank files, with the chief's checkpoint hooks in order."""
    write_staged(path, stage(setup, callbacks, progress, settings), callbacks)


def write_rank_files(path: pathlib.Path, rank: int, rng: dict[str, Any] | None = None) -> None:
    """A rank's own RNG state (the chief's is also in state_dict.pth); ``rng`` defaults to
    this process's current state."""
    file = _state.rank_rng_file(path, rank)
    file.parent.mkdir(parents=True, exist_ok=True)
    save_file(_state.rng_state() if rng is None else rng, file)


def save_file(obj: Any, file: pathlib.Path) -> None:
    """``torch.save(obj, file)``, hashed as it is written: the checkpoint's commit then takes
    the sha256 for its manifest from here instead of reading the file back.

    torch.save's own crc32 of every record is left out: it is about two thirds of the CPU
    torch.save spends (measured, 300 MB: 0.19 CPU-s with it, 0.07 without), and the
    manifest's sha256, verified on every read, already covers every byte. torch.load reads
    such files; only unzip tools would complain. Where this torch's internals are not the
    ones expected, it is a plain torch.save."""
    with _manifest.HashedFile(file) as f:
        writer = _crc_free_writer(cast(IO[bytes], f)) if _save_internals_known() else None
        if writer is not None:
            ser = torch.serialization
            ser._save(obj, writer, pickle, ser.DEFAULT_PROTOCOL, False)
            writer.write_end_of_file()
        else:
            torch.save(obj, cast(IO[bytes], f))  # torch only calls write (and flush)


def _crc_free_writer(buffer: IO[bytes]) -> Any:
    """torch's zip writer without crc32, or None where this torch's writer takes other
    arguments (nothing is written before this answers, so torch.save can still run)."""
    try:
        alignment = torch.serialization._get_storage_alignment()
        return torch._C.PyTorchFileWriter(buffer, False, alignment)
    except (TypeError, AttributeError):
        return None


@functools.cache
def _save_internals_known() -> bool:
    """Whether torch.serialization has the private pieces torch.save is built from, with the
    signature save_file calls them with (checked once, before any byte is written)."""
    ser = torch.serialization
    try:
        params = list(inspect.signature(ser._save).parameters)
        ser._get_storage_alignment  # noqa: B018
        ser.DEFAULT_PROTOCOL  # noqa: B018
        torch._C.PyTorchFileWriter  # noqa: B018
    except (AttributeError, TypeError, ValueError):
        return False
    return params == [
        "obj",
        "zip_file",
        "pickle_module",
        "pickle_protocol",
        "_disable_byteorder_record",
    ]


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
    if (path / DCP_DIR).is_dir():
        restore_sharded(path, setup, weights_only=weights_only)
    else:
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
