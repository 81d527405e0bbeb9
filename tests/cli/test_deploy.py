"""``det deploy local ...``: 0.37's deployment commands mapped onto ``det master up|down``."""

from __future__ import annotations

import os
import pathlib
import signal

import psutil
import pytest
import requests
from _kit.cli import Det
from _kit.master import free_port

pytestmark = pytest.mark.e2e


def _cleanup(home: pathlib.Path) -> None:
    pid_file = home / "master.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            proc = psutil.Process(pid)
            if "determined.master" in " ".join(proc.cmdline()):
                os.kill(pid, signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def test_cluster_up_and_down_map_to_master_up_and_down(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "home"
    det = Det(home)
    port = free_port()
    try:
        r = det(
            "deploy", "local", "cluster-up", "--master-port", str(port),
            "--det-version", "0.37.0", "--agents", "2", "--no-gpu",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "as `det master up" in r.stdout
        url = f"http://127.0.0.1:{port}"
        assert f"Master running at {url}" in r.stdout
        # The container-only flags are named once, as ignored.
        assert r.stderr.count("ignoring") == 1
        for flag in ("--det-version", "--agents", "--gpu"):
            assert flag in r.stderr
        assert requests.get(url + "/info", timeout=5).ok
        assert f"Master running at {url}" in det.ok("master", "status")

        down = det("deploy", "local", "cluster-down", "--cluster-name", "x")
        assert down.returncode == 0, down.stderr
        assert f"Stopped the master at {url}" in down.stdout
        assert "--cluster-name" in down.stderr
        assert not (home / "master.pid").exists()
        assert "No master is running" in det.ok("deploy", "local", "master-down")
    finally:
        _cleanup(home)


@pytest.mark.parametrize(
    "flags",
    [
        ["--master-config-path", "master.yaml"],
        ["--initial-user-password", "pw"],
        ["--enterprise-edition"],
    ],
)
def test_flags_that_cannot_apply_are_refused(tmp_path: pathlib.Path, flags: list[str]) -> None:
    home = tmp_path / "home"
    r = Det(home)("deploy", "local", "master-up", "--master-port", str(free_port()), *flags)
    assert r.returncode == 1
    assert flags[0] in r.stderr and "det master up" in r.stderr
    assert not (home / "master.pid").exists()


def test_unknown_flag_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    r = Det(tmp_path / "home")("deploy", "local", "cluster-up", "--no-such-flag")
    assert r.returncode == 2
    assert "--no-such-flag" in r.stderr
