"""Helpers of the CLI tests: ``det`` as a real subprocess, a real master on 127.0.0.1."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time

import requests

REPO = pathlib.Path(__file__).resolve().parents[2]

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(home: pathlib.Path) -> dict[str, str]:
    """The test's environment without DET_* (DET_MASTER above all), with its own data dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(REPO)
    env["DET_HOME"] = str(home)
    return env


class Master:
    """``python -m determined.master`` with no resource manager: trials stay QUEUED."""

    def __init__(self, data_dir: pathlib.Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "determined.master", "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), "--resource-manager", "none"]
        log = open(self.data_dir / "master.log", "ab")  # noqa: SIM115 (held by the child)
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=clean_env(self.data_dir)
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.data_dir / "master.log").read_text())
            try:
                if requests.get(self.url + "/info", timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"master did not start: {(self.data_dir / 'master.log').read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Det:
    """Runs ``python -m determined.cli`` with a private DET_HOME (token cache, local master)."""

    def __init__(self, home: pathlib.Path, master: str | None = None) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.master = master

    def __call__(
        self, *args: str, input: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full = clean_env(self.home)
        if self.master:
            full["DET_MASTER"] = self.master
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
