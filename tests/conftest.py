from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator

import pytest
from _kit import tiers
from _kit.master import MasterProcess
from _kit.recording_master import RecordingMaster

import determined._info


def pytest_configure(config: pytest.Config) -> None:
    # The fast tier's guard: only tests marked e2e start master, det, launcher or trial processes.
    sys.addaudithook(tiers.audit_subprocess)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    # Set before any fixture of the test (module- and session-scoped ones too) is set up.
    tiers.current = item
    MasterProcess.of_this_test = list(MasterProcess.running)
    try:
        return (yield)
    finally:
        tiers.current = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[pytest.TestReport]:
    report = yield
    if report.failed:
        for master in MasterProcess.of_this_test:
            report.sections.append((f"end of master log ({master.url})", master.log_tail()))
    return report


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts off-cluster, with its own data dir and a fresh cluster-info cache."""
    for key in list(os.environ):
        if key.startswith("DET_") or key in ("USE_TORCH_DISTRIBUTED", "USE_HOROVOD"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DET_HOME", str(tmp_path / "det_home"))
    determined._info._reset_cluster_info_cache()
    yield
    determined._info._reset_cluster_info_cache()


@pytest.fixture
def recording_master() -> Iterator[RecordingMaster]:
    with RecordingMaster() as m:
        yield m
