"""The data dir (determined/common/_paths.py): where local runs keep checkpoints and TensorBoard
files. A deliberate difference from Determined 0.37, which used
``appdirs.user_data_dir("determined")`` (docs/core.md)."""

from __future__ import annotations

import pathlib

import pytest

from determined import core


def _store_one() -> pathlib.Path:
    with (
        core.init(tensorboard_mode=core.TensorboardMode.MANUAL) as ctx,
        ctx.checkpoint.store_path({"steps_completed": 1}) as (_path, storage_id),
    ):
        pass
    return pathlib.Path(storage_id)


@pytest.mark.parametrize(
    "env, base",
    [
        ({"DET_HOME": "dh"}, "dh"),
        ({"DET_HOME": "dh", "XDG_DATA_HOME": "xdg"}, "dh"),
        ({"XDG_DATA_HOME": "xdg"}, "xdg/redetermined"),
        ({}, "home/.local/share/redetermined"),
    ],
)
def test_local_checkpoints_go_under_the_data_dir(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], base: str
) -> None:
    for name in ("DET_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name, value in env.items():
        monkeypatch.setenv(name, str(tmp_path / value))
    storage_id = _store_one()
    assert (tmp_path / base / "checkpoints" / storage_id / "metadata.json").is_file()
