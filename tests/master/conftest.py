"""Fixtures of the master's tests: real master processes on 127.0.0.1 (see master_kit)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from master_kit import MasterProcess


@pytest.fixture
def master(tmp_path: pathlib.Path) -> Iterator[MasterProcess]:
    """A fresh master subprocess for one test."""
    m = MasterProcess(tmp_path / "master")
    m.start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def shared_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    """One master for a module's tests that do not restart it."""
    m = MasterProcess(tmp_path_factory.mktemp("shared") / "master")
    m.start()
    yield m
    m.stop()
