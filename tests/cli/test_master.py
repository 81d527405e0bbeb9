"""``det master up|status|down``: a daemon from the data dir, found by later commands."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import stat

import psutil
import pytest
import requests
from _kit.cli import CONFIG, Det
from _kit.master import free_port

pytestmark = pytest.mark.e2e


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cleanup(home: pathlib.Path) -> None:
    """Kill a master a failed test left behind (by its own pid file only)."""
    pid_file = home / "master.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        if _alive(pid) and "determined.master" in " ".join(psutil.Process(pid).cmdline()):
            os.kill(pid, signal.SIGKILL)


def test_up_status_down_lifecycle(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "home"
    det = Det(home)  # no DET_MASTER, no -m
    port = free_port()
    try:
        out = det.ok("master", "up", "--port", str(port), "--cpu-slots", "1")
        url = f"http://127.0.0.1:{port}"
        assert f"Master running at {url}" in out
        pid = int((home / "master.pid").read_text())
        assert int((home / "master.port").read_text()) == port
        # The data dir and what the daemon writes there are private (issue #35 item 7).
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for name in ("master.pid", "master.port", "master.log", "master.db"):
            assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
        proc = psutil.Process(pid)
        assert "determined.master" in proc.cmdline()
        assert proc.cmdline()[proc.cmdline().index("--cpu-slots") + 1] == "1"
        assert requests.get(url + "/info", timeout=5).ok

        assert f"Master running at {url}" in det.ok("master", "status")
        # Later commands find the daemon without -m or DET_MASTER.
        assert "You are logged in as user 'determined'" in det.ok("user", "whoami")
        assert url in json.loads((home / "auth.json").read_text())["masters"]

        again = det("master", "up", "--port", str(port))
        assert again.returncode == 1
        assert "already running" in again.stderr

        assert f"Stopped the master at {url}" in det.ok("master", "down")
        assert not _alive(pid)
        assert not (home / "master.pid").exists()
        assert not (home / "master.port").exists()
        status = det("master", "status")
        assert status.returncode == 1
        assert "No master is running" in status.stderr
        assert "No master is running" in det.ok("master", "down")
    finally:
        _cleanup(home)


def test_up_takes_a_master_config_file(tmp_path: pathlib.Path) -> None:
    """``det master up --config-file F``: the daemon reads the file (0.37's
    ``task_container_defaults`` here); the command line's options win over it."""
    home = tmp_path / "home"
    config = tmp_path / "master.yaml"
    config.write_text(
        "cluster_name: from-file\ncpu_slots: 3\n"
        "task_container_defaults: {startup_hook: echo from the file}\n"
    )
    port = free_port()
    try:
        Det(home).ok("master", "up", "--port", str(port), "--config-file", str(config))
        url = f"http://127.0.0.1:{port}"
        assert requests.get(url + "/info", timeout=5).json()["cluster_name"] == "from-file"
        admin = requests.Session()
        token = requests.post(
            url + "/api/v1/auth/login", json={"username": "admin", "password": ""}, timeout=5
        ).json()["token"]
        admin.headers["Authorization"] = f"Bearer {token}"
        shown = admin.get(url + "/api/v1/master/config", timeout=5).json()["config"]
        assert shown["task_container_defaults"] == {"startup_hook": "echo from the file"}
        assert shown["resource_manager"]["cpu_slots"] == 3
    finally:
        Det(home)("master", "down")
        _cleanup(home)


def test_up_reports_a_master_that_cannot_start(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "home"
    # A database nothing serves (a port held by another program is refused before the master
    # starts: test_up_on_a_taken_port_says_how_to_choose_another).
    unserved = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    try:
        r = Det(home)("master", "up", "--port", str(free_port()), "--db-url", unserved)
    finally:
        _cleanup(home)
    assert r.returncode == 1
    assert "the master exited" in r.stderr
    assert "Traceback" not in r.stderr.split("the end of", 1)[0]
    assert not (home / "master.pid").exists()


def _port_8080_free() -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 8080))
        except OSError:
            return False
    return True


@pytest.mark.skipif(not _port_8080_free(), reason="the local master's default port is in use")
def test_create_starts_the_local_master(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "home"
    det = Det(home)
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    model = tmp_path / "model"
    model.mkdir()
    (model / "train.py").write_text("print('hi')\n")
    try:
        out = det.ok("e", "create", str(config), str(model))
        assert "starting a local one" in out
        assert "Started a local master at http://127.0.0.1:8080" in out
        assert "Created experiment 1" in out
        pid = int((home / "master.pid").read_text())
        assert _alive(pid)
        det.ok("master", "down")
        assert not _alive(pid)
    finally:
        _cleanup(home)


def test_up_beyond_loopback_refuses_blank_passwords(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "home"
    r = Det(home)("master", "up", "--port", str(free_port()), "--host", "0.0.0.0")
    assert r.returncode == 1
    assert "blank password" in r.stderr and "det user change-password admin" in r.stderr
    assert stat.S_IMODE((home / "master.db").stat().st_mode) == 0o600


def test_create_takes_another_port_when_8080_is_taken(tmp_path: pathlib.Path) -> None:
    """Issue 38 item 2: the master ``det e create`` starts takes the next free port when
    another program holds 8080, says so and how to choose one; later commands find it."""
    if _port_8080_free():
        holder = socket.socket()
        holder.bind(("127.0.0.1", 8080))
        holder.listen()
    else:
        holder = None
        try:
            if requests.get("http://127.0.0.1:8080/info", timeout=2).ok:
                pytest.skip("a master answers at 8080: det e create would use it")
        except requests.RequestException:
            pass  # something that is not a master holds it: the case under test
    home = tmp_path / "home"
    det = Det(home)
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    model = tmp_path / "model"
    model.mkdir()
    (model / "train.py").write_text("print('hi')\n")
    try:
        out = det.ok("e", "create", "--paused", str(config), str(model))
        port = int((home / "master.port").read_text())
        assert port != 8080
        assert (
            f"Port 8080 is in use by another program, so the master takes port {port} "
            "(choose one with `det master up --port N`; other det commands find it by "
            "themselves)"
        ) in out
        assert f"Started a local master at http://127.0.0.1:{port}" in out
        assert "Created experiment 1" in out
        assert "PAUSED" in det.ok("e", "list")
        det.ok("master", "down")
    finally:
        _cleanup(home)
        if holder is not None:
            holder.close()


def test_up_on_a_taken_port_says_how_to_choose_another(tmp_path: pathlib.Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        home = tmp_path / "home"
        r = Det(home)("master", "up", "--port", str(port))
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"det: port {port} is in use by another program; choose another port with "
        "`det master up --port N`"
    )
    assert not (home / "master.pid").exists()
