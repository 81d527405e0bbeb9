"""``determined.__all__`` and ``determined.core.__all__`` are exactly what the packages offer:
every listed name imports, nothing public is left out, nothing private is listed.

The public names are read in a fresh interpreter, where no other test has imported submodules
that would show up as attributes of the package.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

import determined as det
from determined import core

# Determined 0.37's public Core API names, which user code may import
# (docs/reference/harness.md §2-§8).
REFERENCE_CORE_NAMES = {
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyCheckpointContext",
    "DummyDistributedContext",
    "DummyExperimentalCoreContext",
    "DummyPreemptContext",
    "DummyProfilerContext",
    "DummySearcherContext",
    "DummySearcherOperation",
    "DummyTrainContext",
    "EarlyExitReason",
    "ExperimentalCoreContext",
    "PreemptContext",
    "PreemptMode",
    "ProfilerContext",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "init",
}

# What the module shows: dir() and getattr(), so that names it loads on first use (the
# package's module __getattr__) count as they would be used.
_FRESH_DIR = """
import json, sys, types, importlib
m = importlib.import_module(sys.argv[1])
shown = {n: getattr(m, n) for n in dir(m)}
print(json.dumps({
    "all": list(m.__all__),
    "public": sorted(n for n in shown if not n.startswith("_") and n != "annotations"),
    "modules": sorted(n for n, v in shown.items() if isinstance(v, types.ModuleType)),
}))
"""


def _fresh(module: str) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_DIR, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result: dict[str, list[str]] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("module", [det, core], ids=lambda m: m.__name__)
def test_all_is_sorted_unique_and_importable(module: types.ModuleType) -> None:
    names = list(module.__all__)
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert not name.startswith("_") or name == "__version__", name
        namespace: dict[str, object] = {}
        exec(f"from {module.__name__} import {name}", namespace)
        assert namespace[name] is getattr(module, name)


@pytest.mark.parametrize("module", ["determined", "determined.core"])
def test_all_lists_every_public_name(module: str) -> None:
    fresh = _fresh(module)
    listed = set(fresh["all"])
    # Submodules are attributes of a package once imported; only `errors` is public API.
    public = set(fresh["public"]) - (set(fresh["modules"]) - listed)
    assert public == listed - {"__version__"}


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from determined.core import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(core.__all__)


def test_core_keeps_every_reference_name_and_defines_them_itself() -> None:
    assert set(core.__all__) == REFERENCE_CORE_NAMES
    for name in core.__all__:
        assert getattr(core, name).__module__.startswith("determined.core."), name


def test_det_top_level_names() -> None:
    assert {"ClusterInfo", "TrialInfo", "InvalidHP", "get_cluster_info", "errors"} <= set(
        det.__all__
    )
    assert det.errors.InvalidExperimentException.__mro__[1] is BaseException
