"""Where redetermined keeps its files on this machine."""

from __future__ import annotations

import os
import pathlib


def data_dir() -> pathlib.Path:
    """``$DET_HOME`` when set, else ``~/.local/share/redetermined``: database, checkpoints, logs."""
    home = os.environ.get("DET_HOME")
    if home:
        return pathlib.Path(home).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".local" / "share"
    return base / "redetermined"


def default_checkpoint_dir() -> pathlib.Path:
    """Local runs store checkpoints here unless ``checkpoint_storage`` says otherwise."""
    return data_dir() / "checkpoints"


def default_tensorboard_dir() -> pathlib.Path:
    """Local runs in TensorBoard AUTO mode write event files under here."""
    return data_dir() / "tensorboard"
