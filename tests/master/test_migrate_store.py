"""``det master migrate-store --to postgresql://...``: a data dir's whole history moves from
SQLite into an empty PostgreSQL database, and ``det master up`` serves the same history from it
and keeps going (issue #18 item 3)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import stat
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import requests
from _kit.cli import Det
from _kit.master import free_port
from _kit.postgres import PostgresServer

pytestmark = pytest.mark.e2e

TRAIN = """\
from determined import core

with core.init() as ctx:
    for op in ctx.searcher.operations():
        for step in range(1, op.length + 1):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        with ctx.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
            (path / "w.txt").write_text("weights")
        ctx.train.report_validation_metrics(op.length, {"loss": 0.25})
        op.report_completed(0.25)
print("trained", flush=True)
"""

CONFIG = """\
name: moved
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 4}
checkpoint_storage: {type: shared_fs, host_path: STORAGE}
"""


@pytest.fixture
def det(tmp_path: pathlib.Path) -> Iterator[Det]:
    cli = Det(tmp_path / "home")
    yield cli
    pid_file = tmp_path / "home" / "master.pid"
    cli("master", "down")
    if pid_file.exists() and psutil.pid_exists(int(pid_file.read_text())):
        psutil.Process(int(pid_file.read_text())).kill()


def _create_and_wait(det: Det, tmp_path: pathlib.Path, url: str) -> int:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "train.py").write_text(TRAIN)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.replace("STORAGE", str(tmp_path / "ckpts")))
    out = det.ok("e", "create", str(config), str(model))
    exp_id = int(re.findall(r"Created experiment (\d+)", out)[0])
    deadline = time.monotonic() + 90
    while _get(url, f"/api/v1/experiments/{exp_id}")["experiment"]["state"] != "STATE_COMPLETED":
        assert time.monotonic() < deadline, "the experiment did not complete"
        time.sleep(0.2)
    return exp_id


def _get(url: str, path: str) -> Any:
    r = requests.get(url + path, headers={"Authorization": f"Bearer {_token(url)}"}, timeout=10)
    assert r.ok, r.text
    return r.json()


def _history(url: str, exp_id: int) -> dict[str, Any]:
    """What clients read of one experiment, minus what changes by itself (durations)."""
    exp = _get(url, f"/api/v1/experiments/{exp_id}")["experiment"]
    exp.pop("duration", None)
    [trial] = _get(url, f"/api/v1/experiments/{exp_id}/trials")["trials"]
    tid = trial["id"]
    metrics = {
        group: _ndjson(url, f"/api/v1/trials/metrics/trial_metrics?trialIds={tid}&group={group}")
        for group in ("training", "validation")
    }
    logs = [line["result"]["log"] for line in _ndjson(url, f"/api/v1/trials/{tid}/logs")]
    return {
        "experiment": exp,
        "trial": trial,
        "metrics": metrics,
        "checkpoints": _get(url, f"/api/v1/trials/{tid}/checkpoints"),
        "logs": logs,
    }


def _ndjson(url: str, path: str) -> list[Any]:
    r = requests.get(url + path, headers={"Authorization": f"Bearer {_token(url)}"}, timeout=10)
    assert r.ok, r.text
    return [json.loads(line) for line in r.iter_lines() if line]


def _token(url: str) -> str:
    body = requests.post(
        url + "/api/v1/auth/login", json={"username": "admin", "password": ""}, timeout=10
    ).json()
    return str(body["token"])


def test_history_moves_to_postgres_and_the_master_continues_there(
    det: Det, tmp_path: pathlib.Path, postgres_server: PostgresServer
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    det.ok("master", "up", "--port", str(port), "--cpu-slots", "1")
    first = _create_and_wait(det, tmp_path, url)
    before = _history(url, first)
    assert before["logs"] and before["checkpoints"]["checkpoints"]
    assert len(before["metrics"]["training"][0]["result"]["metrics"]) == 4
    assert before["metrics"]["validation"][0]["result"]["metrics"]
    det.ok("master", "down")

    target = postgres_server.new_database()
    out = det.ok("master", "migrate-store", "--to", target)
    assert out.startswith("Copied ") and "1 experiments, 1 trials, 1 checkpoints" in out, out
    remembered = tmp_path / "home" / "master.db_url"
    assert remembered.read_text().strip() == target
    assert stat.S_IMODE(os.stat(remembered).st_mode) == 0o600

    det.ok("master", "up", "--port", str(port), "--cpu-slots", "1")  # no --db-url: remembered
    assert _history(url, first) == before
    second = _create_and_wait(det, tmp_path, url)  # ids continue after the copied ones
    assert second == first + 1
    assert _get(url, "/api/v1/experiments")["pagination"]["total"] == 2
    det.ok("master", "down")

    # The same target again: refused, nothing mixed in.
    again = det("master", "migrate-store", "--to", target)
    assert again.returncode != 0
    assert "already holds a master's history" in again.stderr, again.stderr


def test_migrate_store_refuses_while_the_master_runs_or_without_history(
    det: Det, tmp_path: pathlib.Path, postgres_server: PostgresServer
) -> None:
    target = postgres_server.new_database()
    nothing = det("master", "migrate-store", "--to", target)
    assert nothing.returncode != 0 and "nothing to migrate" in nothing.stderr
    det.ok("master", "up", "--port", str(free_port()))
    running = det("master", "migrate-store", "--to", target)
    assert running.returncode != 0 and "det master down" in running.stderr
