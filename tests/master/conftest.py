"""Fixtures of the master's tests: real master processes on 127.0.0.1 (see master_kit)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from master_kit import MasterProcess
from trial_kit import Cluster


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


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Cluster]:
    """A fresh master whose local resource manager runs trials, with trial_kit's client. It has
    one CPU slot, or ``CLUSTER_CPU_SLOTS`` where the test module sets that."""
    slots = getattr(request.module, "CLUSTER_CPU_SLOTS", 1)
    m = MasterProcess(tmp_path / "master", cpu_slots=slots)
    m.start()
    yield Cluster(m)
    m.stop()
