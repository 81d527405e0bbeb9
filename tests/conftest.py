from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator

import pytest

# Tests run under --import-mode=importlib (pyproject.toml): test files in different folders may
# share a name. Helper modules are imported by plain name, so every test folder is on sys.path;
# their names are unique across folders (``*_kit.py``), and nothing imports ``conftest``.
_TESTS = pathlib.Path(__file__).parent
_SKIP = ("fixtures", "__pycache__", ".")
for _dir in [_TESTS, *sorted(d for d in _TESTS.rglob("*") if d.is_dir())]:
    if _dir == _TESTS or not any(part.startswith(_SKIP) for part in _dir.relative_to(_TESTS).parts):
        sys.path.insert(0, str(_dir))

from recording_master import RecordingMaster  # noqa: E402

import determined._info  # noqa: E402


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
