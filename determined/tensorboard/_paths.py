"""Where TensorBoard files are written, and where their copies live in storage."""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import Mapping
from typing import Any

from determined.common import _paths


def get_base_path(checkpoint_config: Mapping[str, Any]) -> pathlib.Path:
    """The directory a trial on a cluster writes TensorBoard files into (the reference's rule):
    ``/tmp/tensorboard-<DET_ALLOCATION_ID>-<HOROVOD_RANK or 0>``, or the same name under the
    checkpoint storage's ``base_path`` when that key is set.

    This is what ``TrainContext.get_tensorboard_path()`` returns on a cluster.
    """
    allocation_id = os.environ.get("DET_ALLOCATION_ID", "")
    rank = int(os.environ.get("HOROVOD_RANK", 0))
    base = checkpoint_config.get("base_path")
    root = pathlib.Path(base) if base else pathlib.Path("/tmp")
    return root / f"tensorboard-{allocation_id}-{rank}"


def local_base_path(run_name: str | None = None) -> pathlib.Path:
    """Where a run without a master writes TensorBoard files:
    ``<data dir>/tensorboard/<run_name>``, or ``.../<random uuid hex>`` without a name
    (data dir: ``$DET_HOME`` or ``~/.local/share/redetermined``). Point ``tensorboard --logdir``
    at ``<data dir>/tensorboard`` to compare runs."""
    if run_name is not None and (not run_name or "/" in run_name or run_name in (".", "..")):
        raise ValueError(
            f"a TensorBoard run name must be a non-empty file name without '/', not {run_name!r}"
        )
    return _paths.default_tensorboard_dir() / (run_name or uuid.uuid4().hex)


def get_experiment_sync_path(cluster_id: str, experiment_id: int | str) -> pathlib.PurePosixPath:
    """``<cluster_id>/tensorboard/experiment/<experiment_id>``, relative to the storage root."""
    return pathlib.PurePosixPath(cluster_id, "tensorboard", "experiment", str(experiment_id))


def get_sync_path(
    cluster_id: str, experiment_id: int | str, trial_id: int | str
) -> pathlib.PurePosixPath:
    """``<cluster_id>/tensorboard/experiment/<e>/trial/<t>``: where one trial's TensorBoard
    files are copied, relative to the storage root (shared_fs directory, or bucket prefix)."""
    return get_experiment_sync_path(cluster_id, experiment_id) / "trial" / str(trial_id)
