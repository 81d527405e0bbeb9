"""Helpers of the CLI tests: ``det`` as a real subprocess (the master: ``_kit.master``)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from _kit.master import clean_env

CONFIG = """\
name: cli-test
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length: 100
hyperparameters:
  lr: 0.1
"""


class Det:
    """Runs ``python -m determined.cli`` with a private DET_HOME (token cache, local master)."""

    def __init__(
        self, home: pathlib.Path, master: str | None = None, *, user: str | None = None
    ) -> None:
        """``user``: log in as this user (blank password) instead of the default one."""
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.master = master
        self.user = user

    def __call__(
        self, *args: str, input: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full = clean_env(self.home)
        if self.master:
            full["DET_MASTER"] = self.master
        if self.user:
            full.update(DET_USER=self.user, DET_PASS="")
        full.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "determined.cli", *args],
            input=input,
            capture_output=True,
            text=True,
            env=full,
            timeout=60,
            cwd=self.home,
        )

    def ok(self, *args: str, input: str | None = None) -> str:
        r = self(*args, input=input)
        assert r.returncode == 0, f"det {' '.join(args)} -> {r.returncode}\n{r.stdout}{r.stderr}"
        return r.stdout
