"""Importing a layer loads only what it needs. ``determined`` loads ``core`` and ``util`` on
first use (module ``__getattr__``), and ``determined.tensorboard`` its writer and manager: every
layer imports the package (``from determined import errors``), and the client layers, the
master and ``det`` need no Core API, ZMQ, numpy or TensorBoard. The public names still resolve
as in 0.37 (``det.core``, ``from determined import pytorch``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

HEAVY = ("determined.core", "zmq", "numpy", "tensorboard", "torch")

# Lightest first: each import is blamed only for what it adds.
ENTRIES = [
    "determined",
    "determined.common",
    "determined.common.api",
    "determined.experimental.client",
    "determined.cli",  # `det`
    "determined.master.__main__",  # `python -m determined.master`
    "determined.master._app",
]

_LOADS = """
import importlib, json, sys
added = {}
for name in sys.argv[1:]:
    before = set(sys.modules)
    importlib.import_module(name)
    added[name] = sorted(set(sys.modules) - before)
print(json.dumps(added))
"""


_LAZY_NAMES = """
import sys
import determined as det
assert "determined.core" not in sys.modules
assert "core" in dir(det) and "util" in dir(det)
assert det.core.init is sys.modules["determined.core"].init
assert callable(det.util.make_metrics)
assert det.common.api and det.tensorboard.get_sync_path and det.workload.Workload  # as 0.37's
from determined import core, pytorch
assert core is det.core and pytorch.PyTorchTrial
from determined.tensorboard import TensorboardManager, get_metric_writer
import determined.tensorboard as tb
assert tb.TensorboardManager is TensorboardManager and callable(get_metric_writer)
for module, name in ((det, "no_such_name"), (tb, "no_such_name")):
    try:
        getattr(module, name)
    except AttributeError as e:
        assert name in str(e)
    else:
        raise AssertionError(name)
print("ok")
"""


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Both programs, started at once in fresh interpreters (each mostly imports; one alone
    leaves a core idle); a test waits for its own."""
    programs = {"loads": [_LOADS, *ENTRIES], "lazy_names": [_LAZY_NAMES]}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, argv in programs.items()
    }
    yield procs
    for proc in procs.values():
        if proc.poll() is None:  # its test did not wait for it (failed before)
            proc.kill()
            proc.communicate()


def _output(proc: subprocess.Popen[str]) -> str:
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    return stdout


def test_the_client_layers_the_cli_and_the_master_load_no_core_api(
    runs: dict[str, subprocess.Popen[str]],
) -> None:
    added = json.loads(_output(runs["loads"]))
    heavy = {
        name: [m for m in mods if m.split(".")[0] in HEAVY or m.startswith("determined.core")]
        for name, mods in added.items()
    }
    assert all(not mods for mods in heavy.values()), {k: v[:5] for k, v in heavy.items() if v}
    assert "determined.common.api._session" in added["determined.common.api"]  # it sees imports


def test_the_lazy_names_resolve_as_before(runs: dict[str, subprocess.Popen[str]]) -> None:
    assert _output(runs["lazy_names"]).strip() == "ok"
