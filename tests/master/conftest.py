"""Fixtures of the master's tests: real master processes on 127.0.0.1 (see _kit/master.py)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from _kit.master import MasterProcess
from _kit.trial_cluster import Cluster


@pytest.fixture
def master(tmp_path: pathlib.Path, db_url: str | None) -> Iterator[MasterProcess]:
    """A fresh master subprocess for one test (on PostgreSQL too for a test marked
    ``both_stores``; see tests/conftest.py)."""
    with MasterProcess(tmp_path / "master", db_url=db_url) as m:
        yield m


@pytest.fixture(scope="module")
def shared_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    """One master for a module's tests that do not restart it."""
    with MasterProcess(tmp_path_factory.mktemp("shared") / "master") as m:
        yield m


@pytest.fixture
def cluster(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, db_url: str | None
) -> Iterator[Cluster]:
    """A fresh master whose local resource manager runs trials, with _kit.trial_cluster's
    client. It has one CPU slot, or ``CLUSTER_CPU_SLOTS`` where the test module sets that."""
    slots = getattr(request.module, "CLUSTER_CPU_SLOTS", 1)
    with MasterProcess(tmp_path / "master", cpu_slots=slots, db_url=db_url) as m:
        yield Cluster(m)
