"""Each experiment's trials run in a Python environment of their own (issue #21 item 1): a
startup hook's ``pip install`` lands there, never in the master's environment or another
experiment's; the environment sees the master's packages, is reused by the experiment's runs
and deleted with the experiment."""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import subprocess
import sys
import zipfile

import pytest
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

PACKAGE = "redet_tiny_pkg_zz"


def _wheel(directory: pathlib.Path) -> pathlib.Path:
    """A minimal pure-Python wheel, built by hand (pip installs it with no network)."""
    files = {
        f"{PACKAGE}/__init__.py": b"VALUE = 42\n",
        f"{PACKAGE}-1.0.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n"
        ).encode(),
        f"{PACKAGE}-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record_lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{name},sha256={digest},{len(data)}")
    record = f"{PACKAGE}-1.0.dist-info/RECORD"
    files[record] = ("\n".join([*record_lines, f"{record},,"]) + "\n").encode()
    path = directory / f"{PACKAGE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


TRAIN = f"""\
import json, os, sys
from determined import core
try:
    import {PACKAGE}
    where = {PACKAGE}.__file__
except ImportError:
    where = None
import determined, torch  # the master's packages are visible
info = {{"pkg": where, "python": sys.executable, "prefix": sys.prefix,
        "venv": os.environ.get("VIRTUAL_ENV"), "determined": determined.__file__}}
print("ENVINFO " + json.dumps(info), flush=True)
with core.init() as ctx:
    for op in ctx.searcher.operations():
        ctx.train.report_validation_metrics(op.length, {{"loss": 1.0}})
        op.report_completed(1.0)
"""


def _config(name: str) -> dict[str, object]:
    return {
        "name": name,
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": 1},
        "max_restarts": 0,
    }


def _env_info(cluster: Cluster, exp_id: int) -> dict[str, str | None]:
    [trial] = cluster.trials(exp_id)
    lines = [e["log"] for e in cluster.logs(trial["taskId"]) if "ENVINFO " in e["log"]]
    assert lines, cluster.logs(trial["taskId"])
    return dict(json.loads(lines[-1].split("ENVINFO ", 1)[1]))


def test_a_startup_hook_pip_install_stays_in_its_experiment(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    wheel = _wheel(tmp_path)
    hook = f"pip install --no-index --no-deps --quiet {wheel}\n"
    first = cluster.create(_config("installs"), {"train.py": TRAIN, "startup-hook.sh": hook})
    cluster.wait_experiment(first, "STATE_COMPLETED", timeout=120)
    envs = cluster.master.data_dir / "envs"
    info = _env_info(cluster, first)
    assert info["pkg"] is not None and info["pkg"].startswith(str(envs / f"exp-{first}"))
    assert info["venv"] == str(envs / f"exp-{first}") and info["prefix"] == info["venv"]

    # Not in the master's environment...
    master_import = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}"], capture_output=True, timeout=60
    )
    assert master_import.returncode != 0
    # ...nor in another experiment's.
    second = cluster.create(_config("plain"), {"train.py": TRAIN})
    cluster.wait_experiment(second, "STATE_COMPLETED", timeout=120)
    assert _env_info(cluster, second)["pkg"] is None
    assert (envs / f"exp-{second}").is_dir()

    # Deleted with its experiment.
    assert cluster.s.delete(cluster.url + f"/api/v1/experiments/{first}").status_code == 200
    assert not (envs / f"exp-{first}").exists()
    assert (envs / f"exp-{second}").is_dir()
