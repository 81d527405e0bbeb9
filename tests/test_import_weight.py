"""Importing a layer loads only what it needs. ``determined`` loads ``core`` and ``util`` on
first use (module ``__getattr__``), and ``determined.tensorboard`` its writer and manager: every
layer imports the package (``from determined import errors``), and the client layers, the
master and ``det`` need no Core API, ZMQ, numpy or TensorBoard. The public names still resolve
as in 0.37 (``det.core``, ``from determined import pytorch``)."""

from __future__ import annotations

import json
import subprocess
import sys

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


def _python(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_client_layers_the_cli_and_the_master_load_no_core_api() -> None:
    added = json.loads(_python(_LOADS, *ENTRIES))
    heavy = {
        name: [m for m in mods if m.split(".")[0] in HEAVY or m.startswith("determined.core")]
        for name, mods in added.items()
    }
    assert all(not mods for mods in heavy.values()), {k: v[:5] for k, v in heavy.items() if v}
    assert "determined.common.api._session" in added["determined.common.api"]  # it sees imports


def test_the_lazy_names_resolve_as_before() -> None:
    out = _python(
        """
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
    )
    assert out.strip() == "ok"
