"""Fixtures of the CLI tests (the helpers live in _kit/cli.py)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from _kit.cli import CONFIG, Det
from _kit.master import MasterProcess


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    """A master as users run it (no dev endpoints) with no resource manager: trials stay QUEUED."""
    with MasterProcess(tmp_path_factory.mktemp("cli-master") / "data", dev_endpoints=False) as m:
        yield m


@pytest.fixture
def det(master: MasterProcess, tmp_path: pathlib.Path) -> Det:
    """``det`` pointed at the shared master through DET_MASTER, with its own data dir."""
    return Det(tmp_path / "home", master.url)


@pytest.fixture
def model_dir(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(config.yaml, model dir) for ``det e create``."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "train.py").write_text("print('hello')\n")
    (model / "data").mkdir()
    (model / "data" / "big.bin").write_bytes(b"x" * 10)
    (model / ".detignore").write_text("data/\n")
    config = tmp_path / "const.yaml"
    config.write_text(CONFIG)
    return config, model
