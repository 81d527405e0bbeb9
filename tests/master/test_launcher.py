"""determined/master/resources/_launcher.py and _log_capture.py without a master: entrypoint
forms, bind mounts, the work dir, the launch environment, log-line parsing."""

from __future__ import annotations

import io
import json
import pathlib
import socket
import sys
import tarfile
import threading
import time
from typing import Any

import pytest

from determined.common import expconf
from determined.master._errors import InvalidArgument
from determined.master.resources import _launcher, _sandbox
from determined.master.resources._log_capture import (
    BATCH_LINES,
    MAX_QUEUED_LINES,
    LogSink,
    LogWriter,
    parse_line,
)
from determined.master.store import Store, _logs, sqlite_url


def _config(raw: dict[str, Any]) -> expconf.ExperimentConfig:
    """``raw`` with what every config needs, parsed as the master parses it."""
    base = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "x"}}
    return expconf.parse_experiment_config({**base, **raw})


def _spec(config: dict[str, Any], tgz: bytes = b"", **kw: Any) -> _launcher.LaunchSpec:
    values: dict[str, Any] = {
        "allocation_id": "7.abc.2",
        "task_id": "7.abc",
        "trial_id": 3,
        "experiment_id": 7,
        "run_id": 2,
        "token": "tok",
        "slot_ids": [1],
        "gpu": False,
        "config": _config(config),
        "hparams": {"lr": 0.1},
        "seed": 42,
        "latest_checkpoint": None,
        "steps_completed": 0,
        "model_definition": tgz,
    }
    values.update(kw)
    return _launcher.LaunchSpec(**values)


def _tgz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_every_run_starts_through_exec_launch() -> None:
    # exec.launch resolves the three entrypoint forms: tests/launch/test_exec_launch.py.
    assert _launcher.command() == [sys.executable, "-m", "determined.exec.launch"]


def test_port_offsets_skip_live_runs_and_busy_ports() -> None:
    first = _launcher.pick_port_offset(set())
    assert first % _launcher.PORT_OFFSET_STEP == 0
    # A port of the first offset in use by someone else: the next free offset is chosen.
    with socket.socket() as busy:
        busy.bind(("", _launcher.BASE_PORTS[0] + first))
        busy.listen()
        second = _launcher.pick_port_offset(set())
        assert second > first
    assert _launcher.pick_port_offset({first}) > first
    ports = {p + o for p in _launcher.BASE_PORTS for o in (first, second)}
    assert len(ports) == 2 * len(_launcher.BASE_PORTS)


def test_bind_mount_rules(tmp_path: pathlib.Path) -> None:
    ok = {"bind_mounts": [{"host_path": str(tmp_path), "container_path": str(tmp_path)}]}
    _launcher.check_bind_mounts(_config(ok), sandboxed=False)
    moved = {"bind_mounts": [{"host_path": str(tmp_path), "container_path": "/data"}]}
    with pytest.raises(InvalidArgument, match="Use a relative container_path.*bubblewrap"):
        _launcher.check_bind_mounts(_config(moved), sandboxed=False)
    _launcher.check_bind_mounts(_config(moved), sandboxed=True)  # the sandbox mounts it there


def test_moved_mounts_are_seen_only_at_their_container_path() -> None:
    """An absolute container_path other than the host_path is a Mount of the sandbox, not a
    path bound where it is; a directory storage inside it is reached through it."""
    cfg = {
        "bind_mounts": [
            {"host_path": "/srv/a/", "container_path": "/tmp/work_dir"},
            {"host_path": "/srv/b", "container_path": "/data", "read_only": True},
            {"host_path": "/srv/c", "container_path": "/srv/c"},
            {"host_path": "/srv/d", "container_path": "rel", "read_only": True},
        ],
        "checkpoint_storage": {"type": "directory", "container_path": "/tmp/work_dir/ckpt"},
    }
    assert _sandbox.moved_mounts(cfg) == [
        _sandbox.Mount("/srv/a", "/tmp/work_dir"),
        _sandbox.Mount("/srv/b", "/data", read_only=True),
    ]
    assert _sandbox.storage_paths(cfg) == (["/srv/c"], ["/srv/d"])
    cfg["checkpoint_storage"]["container_path"] = "/ckpt"
    assert _sandbox.storage_paths(cfg) == (["/ckpt", "/srv/c"], ["/srv/d"])


def test_work_dir_unpacks_and_links(tmp_path: pathlib.Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "f.txt").write_text("x")
    cfg = {"bind_mounts": [{"host_path": str(host), "container_path": "data/in"}]}
    work = tmp_path / "work"
    _launcher.prepare_work_dir(
        work, _spec(cfg, _tgz({"train.py": "print(1)", "pkg/m.py": ""})), False
    )
    assert (work / "train.py").read_text() == "print(1)"
    assert (work / "pkg" / "m.py").exists()
    assert (work / "data" / "in" / "f.txt").read_text() == "x"
    escape = {"bind_mounts": [{"host_path": str(host), "container_path": "../out"}]}
    with pytest.raises(_launcher.LaunchError, match="leaves the work dir"):
        _launcher.prepare_work_dir(tmp_path / "w2", _spec(escape), False)
    with pytest.raises(_launcher.LaunchError, match="cannot unpack"):
        _launcher.prepare_work_dir(tmp_path / "w3", _spec({}, b"not a tarball"), False)


def test_launch_environment(tmp_path: pathlib.Path) -> None:
    cfg = {"environment": {"environment_variables": {"cpu": ["A=1"], "cuda": ["A=2", "B=x=y"]}}}
    env = _launcher.trial_env(_spec(cfg), "http://127.0.0.1:9", "cid", tmp_path)
    assert env["A"] == "1" and "CUDA_VISIBLE_DEVICES" not in env
    assert (env["DET_ALLOCATION_ID"], env["DET_TRIAL_RUN_ID"]) == ("7.abc.2", "2")
    assert json.loads(env["DET_SLOT_IDS"]) == [1]
    assert "DET_LATEST_CHECKPOINT" not in env
    gpu = _spec(cfg, gpu=True, slot_ids=[2, 3], latest_checkpoint="u", steps_completed=8)
    env = _launcher.trial_env(gpu, "http://m", "cid", tmp_path)
    assert (env["A"], env["B"], env["CUDA_VISIBLE_DEVICES"]) == ("2", "x=y", "2,3")
    assert (env["DET_LATEST_CHECKPOINT"], env["DET_STEPS_COMPLETED"]) == ("u", "8")
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)


def test_launch_environment_carries_the_runs_zmq_ports(tmp_path: pathlib.Path) -> None:
    """Issue #12 item 9: INTER_TRAIN_PROCESS_COMM_PORT_1/_2 are 12360/12376 plus the run's
    port offset, as 0.37's master exports them, so a DistributedContext built directly binds
    the run's own ports; an experiment that sets either in environment_variables keeps its own."""
    env = _launcher.trial_env(_spec({}, port_offset=64), "http://m", "cid", tmp_path)
    assert env["DET_UNIQUE_PORT_OFFSET"] == "64"
    ports = (env["INTER_TRAIN_PROCESS_COMM_PORT_1"], env["INTER_TRAIN_PROCESS_COMM_PORT_2"])
    assert ports == ("12424", "12440")
    own = {"environment": {"environment_variables": ["INTER_TRAIN_PROCESS_COMM_PORT_1=20000"]}}
    env = _launcher.trial_env(_spec(own, port_offset=64), "http://m", "cid", tmp_path)
    assert env["INTER_TRAIN_PROCESS_COMM_PORT_1"] == "20000"
    assert "INTER_TRAIN_PROCESS_COMM_PORT_2" not in env  # the harness derives it: PORT_1 + 16


def test_log_line_parsing() -> None:
    assert parse_line("[rank=3] ERROR: boom") == (3, "LOG_LEVEL_ERROR", "boom")
    assert parse_line("INFO: hi") == (None, "LOG_LEVEL_INFO", "hi")
    assert parse_line("plain [rank=1] INFO: x") == (None, None, "plain [rank=1] INFO: x")


def test_the_log_queue_is_bounded_with_back_pressure(tmp_path: pathlib.Path) -> None:
    """A store that cannot keep up blocks the output readers at MAX_QUEUED_LINES queued lines
    (the trial then blocks on its own stdout), and everything queued is stored afterwards."""
    store = Store(sqlite_url(tmp_path))
    writer = LogWriter(store)
    sink = LogSink(writer, "t.1", "t.1.1")
    total = MAX_QUEUED_LINES + 3 * BATCH_LINES
    done = threading.Event()

    def produce() -> None:
        for i in range(total):
            sink.line(f"line {i}")
        done.set()

    with store._write_lock:  # the store is busy: the writer waits for it
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        time.sleep(1.0)
        assert not done.is_set()  # blocked on the full queue, not buffering without bound
    assert done.wait(30)
    writer.flush()
    with store.read() as conn:
        assert len(_logs.read(conn, "t.1")) == total
    writer.close()
    store.close()


def test_a_run_gets_the_stored_config_byte_for_byte(tmp_path: pathlib.Path) -> None:
    """The master stores a config's JSON; a run parses it back into its typed LaunchSpec and
    hands it on as DET_EXPERIMENT_CONFIG: the same text, key order included (the stored
    configs of tests/fixtures/config_pins.json)."""
    pins = json.loads(
        (pathlib.Path(__file__).parent.parent / "fixtures/config_pins.json").read_text()
    )
    home = str(tmp_path / "home")
    stored = [
        json.loads(v.replace("<DET_HOME>", home))[0]
        for k, v in pins.items()
        if k.endswith(".stored")
    ]
    assert len(stored) >= 5
    for config in stored:
        spec = _spec({})
        spec.config = expconf.parse_experiment_config(config)
        env = _launcher.trial_env(spec, "http://m", "cid", tmp_path)
        assert env["DET_EXPERIMENT_CONFIG"] == json.dumps(config), config["name"]
