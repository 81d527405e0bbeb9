"""Determined 0.37's own ``det`` CLI and SDK, run from ``.refvenv`` (``scripts/setup.sh --tests``
creates it with ``determined==0.37.0``) against a master of ours. It is never imported here:
every call runs in a subprocess of that venv, in a scratch directory so that this repository's
``determined`` is not on its path."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Any

from _kit.master import REPO, MasterProcess

REF = REPO / ".refvenv"


class Ref:
    """Runs the reference's ``det`` and Python in a scratch dir with a scratch HOME."""

    def __init__(self, master: MasterProcess, home: pathlib.Path) -> None:
        self.url = master.url
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "PYTHON"))}
        self.env.update(HOME=str(home), DET_USER="determined", DET_PASS="")

    def det(self, *args: str, ok: bool = True) -> str:
        proc = subprocess.run(
            [str(REF / "bin" / "det"), "-m", self.url, *args],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = proc.stdout + proc.stderr
        if ok:
            assert proc.returncode == 0, f"det {' '.join(args)} failed:\n{out}"
        return out

    def python(self, script: str, *args: str) -> Any:
        """Run ``script`` with the reference's interpreter; its last stdout line is JSON."""
        proc = subprocess.run(
            [str(REF / "bin" / "python"), "-c", script, self.url, *args],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])
