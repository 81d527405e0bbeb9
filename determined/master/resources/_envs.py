"""A Python environment per experiment for its trials' processes, so that a startup hook's
``pip install`` changes that experiment's environment only, never the master's or another
experiment's.

Each is a virtual environment (``<data dir>/envs/exp-<id>``) layered over the master's: its
own ``site-packages`` comes first, and a ``.pth`` file adds the master's site directories
after it (with their own ``.pth`` files, so editable installs work), so a trial sees every
package the master has without copying any. It has no pip of its own: ``pip``/``pip3`` in its
``bin`` run the master's pip module with the environment's interpreter, which installs into the
environment (pip leaves a package it finds outside the environment alone and installs the new
version beside it); ``det`` there is the master's CLI, as 0.37's task images had it. Created
once per experiment (in a temporary directory, renamed into place, so a crash never leaves half
of one), reused by every run of it, deleted with it.
"""

from __future__ import annotations

import os
import shutil
import site
import sysconfig
import tempfile
import venv
from pathlib import Path

PTH_NAME = "_redetermined_base.pth"
PIP_SHIM = """#!{python}
# The master's pip, installing into this environment (redetermined).
import runpy, sys
sys.argv[0] = "pip"
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""
DET_SHIM = """#!{python}
# The master's `det`, run with this environment's interpreter (redetermined).
import sys
from determined.cli import main
sys.exit(main())
"""


def _base_site_dirs() -> list[str]:
    """The master's site directories, in its own order (its venv's, then the system's)."""
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def _site_packages(env: Path) -> Path:
    scheme = sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})
    return Path(scheme["purelib"])


def env_dir(root: Path, experiment_id: int) -> Path:
    return root / f"exp-{experiment_id}"


def task_env_dir(root: Path, task_id: str) -> Path:
    """A non-trial task's own environment (commands, notebooks, ...), removed when it ends."""
    return root / f"task-{task_id}"


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def ensure(root: Path, experiment_id: int) -> Path:
    """The experiment's environment, created on first use."""
    return _ensure(root, env_dir(root, experiment_id))


def ensure_task(root: Path, task_id: str) -> Path:
    """A non-trial task's environment, created on first use."""
    return _ensure(root, task_env_dir(root, task_id))


def remove_task(root: Path, task_id: str) -> None:
    shutil.rmtree(task_env_dir(root, task_id), ignore_errors=True)


def _ensure(root: Path, target: Path) -> Path:
    if python_of(target).exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        venv.EnvBuilder(symlinks=True, with_pip=False, clear=True).create(staging)
        # Paths inside the venv name its final place, not the staging directory.
        site_dir = _site_packages(staging)
        site_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"import site; site.addsitedir({d!r})" for d in _base_site_dirs()]
        (site_dir / PTH_NAME).write_text("\n".join(lines) + "\n")
        final_python = python_of(target)
        for name, text in (("pip", PIP_SHIM), ("pip3", PIP_SHIM), ("det", DET_SHIM)):
            shim = staging / "bin" / name
            shim.write_text(text.format(python=final_python))
            shim.chmod(0o755)
        _fix_activation_paths(staging, target)
        try:
            os.rename(staging, target)
        except OSError:
            if not python_of(target).exists():  # not another creator winning the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _fix_activation_paths(staging: Path, target: Path) -> None:
    """``pyvenv.cfg`` and the activate scripts name the directory they were made in."""
    for path in [staging / "pyvenv.cfg", *(staging / "bin").glob("activate*")]:
        if path.is_file():
            path.write_text(path.read_text().replace(str(staging), str(target)))


def remove(root: Path, experiment_id: int) -> None:
    shutil.rmtree(env_dir(root, experiment_id), ignore_errors=True)


def remove_all_but(root: Path, experiment_ids: set[int]) -> list[int]:
    """Delete the environments (and half-made ones) of experiments not in ``experiment_ids``;
    the ids removed."""
    removed: list[int] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        if entry.name.startswith((".exp-", ".task-", "task-")):
            # Half-made ones, and those of tasks: no task outlives the master that ran it.
            shutil.rmtree(entry, ignore_errors=True)
            continue
        if not entry.name.startswith("exp-"):
            continue
        try:
            exp_id = int(entry.name.removeprefix("exp-"))
        except ValueError:
            continue
        if exp_id not in experiment_ids:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(exp_id)
    return removed


def activate(env: dict[str, str], environment: Path) -> None:
    """Point a process environment at ``environment``: its ``bin`` first on PATH (``python3``,
    ``pip``), ``VIRTUAL_ENV`` set, no ``PYTHONHOME``."""
    env["VIRTUAL_ENV"] = str(environment)
    env.pop("PYTHONHOME", None)
    env["PATH"] = os.pathsep.join([str(environment / "bin"), env.get("PATH", "")])
