from __future__ import annotations

import compileall
import os
import pathlib
import sys
from collections.abc import Iterator

import pytest
from _kit import postgres, tiers
from _kit.master import MasterProcess
from _kit.recording_master import RecordingMaster
from hypothesis import settings

import determined
import determined._info

# The suite runs two workers on two cores beside masters and trial processes: how long one
# drawn example takes says nothing about the code, and hypothesis' default 200 ms deadline
# failed tests at random under that load. Tests that need a deadline set their own.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def pytest_configure(config: pytest.Config) -> None:
    # The fast tier's guard: only tests marked e2e start master, det, launcher or trial processes.
    sys.addaudithook(tiers.audit_subprocess)
    if not hasattr(config, "workerinput"):  # once, in the controller (xdist workers skip)
        _compile_the_package()


def _compile_the_package() -> None:
    """Write the package's bytecode caches. Where PYTHONDONTWRITEBYTECODE is set (as on this
    project's machines) no process writes them, so every master, trial and det process the
    tests start compiled ~200 modules from source again: ~0.25 s of CPU each, minutes per run."""
    package = pathlib.Path(determined.__file__).parent
    compileall.compile_dir(package, quiet=1, workers=0)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    """Let pytest cache the test modules' assertion-rewritten code while it imports them.
    Under PYTHONDONTWRITEBYTECODE it reads that cache but never writes it, so every run
    rewrote all ~500 test modules again: about 5 of the fast tier's 10 s of collection."""
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = saved


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


# ---- the store's backends: SQLite (the default) and PostgreSQL ----------------------------------
# A test marked ``both_stores`` (or a module with it in ``pytestmark``) that uses ``db_url``,
# directly or through ``master`` / ``cluster`` (tests/master/conftest.py), runs once per backend.


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = metafunc.definition.get_closest_marker("both_stores") is not None
    if marked and "store_backend" in metafunc.fixturenames:
        metafunc.parametrize("store_backend", ["sqlite", "postgres"], indirect=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """One throwaway PostgreSQL server for the session (skips where none can start)."""
    reason = postgres.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = postgres.PostgresServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    """``sqlite``, or each backend for a test marked ``both_stores``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_url(store_backend: str, request: pytest.FixtureRequest) -> str | None:
    """A fresh PostgreSQL database's URL, or None: the master's default SQLite file."""
    if store_backend == "sqlite":
        return None
    server: postgres.PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()
