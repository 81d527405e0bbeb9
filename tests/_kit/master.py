"""A real master on 127.0.0.1: the one place tests start ``python -m determined.master``.

``with MasterProcess(data_dir, cpu_slots=1) as m:`` starts it, waits until ``/info`` answers and
stops it on the way out; fixtures that restart it call :meth:`~MasterProcess.start`,
:meth:`~MasterProcess.kill` and :meth:`~MasterProcess.stop` themselves. Only tests marked
``e2e`` may start one (``_kit.tiers``). When a test fails, tests/conftest.py adds the end of the
log of every master it used to its report.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import requests
import yaml

from _kit import tiers

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(home: pathlib.Path) -> dict[str, str]:
    """This environment without DET_* (DET_MASTER above all), with this tree on PYTHONPATH (so
    that child processes run it, not the installed copy) and ``home`` as DET_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(REPO)
    env["DET_HOME"] = str(home)
    return env


class MasterProcess:
    """``python -m determined.master`` on a free port, with ``data_dir`` as its data dir and
    DET_HOME, logging to ``data_dir / "master.log"``; ``url`` is ``http://127.0.0.1:<port>``.

    Without ``cpu_slots`` it runs no trials (``--resource-manager none``: trials stay QUEUED, and
    tests allocate through the dev endpoints); with it, the local resource manager runs them on
    that many CPU slots (``slots_per_agent`` splits them into agents). ``dev_endpoints`` serves
    ``/api/v1/dev``. With ``config_file`` the master reads its options from that YAML file
    (its ``port`` too, when it sets one) and the resource manager is the file's; options given
    here still win. ``args`` go last on the command line; ``env`` is added to the master's
    environment.

    :meth:`kill` is a SIGKILL; :meth:`start` after it is a restart on the same port and data dir.
    """

    running: ClassVar[set[MasterProcess]] = set()
    # Those running when the current test began or started since: a failed test's report gets
    # the end of their logs (tests/conftest.py).
    of_this_test: ClassVar[list[MasterProcess]] = []

    def __init__(
        self,
        data_dir: pathlib.Path,
        *,
        cpu_slots: int | None = None,
        slots_per_agent: int | None = None,
        db_url: str | None = None,
        dev_endpoints: bool = True,
        config_file: pathlib.Path | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.cpu_slots = cpu_slots
        self.slots_per_agent = slots_per_agent
        self.db_url = db_url
        self.dev_endpoints = dev_endpoints
        self.config_file = config_file
        self.args = list(args)
        self.env = dict(env or {})
        file_port = _config_port(config_file) if config_file is not None else None
        self._port_option = file_port is None
        self.port = file_port if file_port is not None else free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / "master.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def store_url(self) -> str:
        """The database it writes: ``db_url``, or the SQLite file in its data dir."""
        from determined.master.store import sqlite_url

        return self.db_url or sqlite_url(self.data_dir)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "determined.master", "--data-dir", str(self.data_dir)]
        if self.config_file is not None:
            cmd += ["--config-file", str(self.config_file)]
        if self._port_option:
            cmd += ["--port", str(self.port)]
        if self.dev_endpoints:
            cmd.append("--dev-endpoints")
        if self.db_url:
            cmd += ["--db-url", self.db_url]
        if self.cpu_slots is not None:
            cmd += ["--cpu-slots", str(self.cpu_slots)]
        elif self.config_file is None:
            cmd += ["--resource-manager", "none"]
        if self.slots_per_agent is not None:
            cmd += ["--slots-per-agent", str(self.slots_per_agent)]
        chosen = self.config_file is not None and "task_isolation" in self.config_file.read_text()
        if not chosen and "--task-isolation" not in self.args:
            # Tests talk to their trials through files outside the work dir, which the task
            # sandbox hides (docs/security.md): no sandbox unless a test asks for one
            # (tests/master/test_sandbox.py), or the run does (TEST_TASK_ISOLATION=auto).
            cmd += ["--task-isolation", os.environ.get("TEST_TASK_ISOLATION", "none")]
            if "--default-task" not in self.args:
                # The same files, written by tasks of a root master's sandbox: as root, not as
                # the product's unprivileged default (tests/master/test_identities.py).
                cmd += ["--default-task", "root:0:root:0"]
        return cmd + self.args

    def start(self, timeout: float = 30.0) -> None:
        """Start it and wait until ``/info`` answers; raise with its log if it does not."""
        tiers.require_e2e("starts a master process")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {**clean_env(self.data_dir), **self.env}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env
            )
        MasterProcess.running.add(self)
        if self not in MasterProcess.of_this_test:
            MasterProcess.of_this_test.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                MasterProcess.running.discard(self)
                raise RuntimeError(f"master exited {self.proc.returncode}: {self.log_tail()}")
            try:
                if requests.get(self.url + "/info", timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        self.kill()  # no orphan master when a test gives up on it
        raise RuntimeError(f"master did not answer /info in {timeout}s: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        MasterProcess.running.discard(self)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL after 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        MasterProcess.running.discard(self)

    def __enter__(self) -> MasterProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:] or "(empty log)"
        except FileNotFoundError:
            return "(no log)"

    def session(self, token: str | None = None, *, allocation: bool = False) -> requests.Session:
        """A requests session; with ``token`` as a user's or an allocation's bearer token."""
        s = requests.Session()
        if token is None:
            token = login(self.url, "admin")
        header = "Grpc-Metadata-x-allocation-token" if allocation else "Authorization"
        s.headers[header] = f"Bearer {token}"
        return s


def _config_port(config_file: pathlib.Path) -> int | None:
    config = yaml.safe_load(config_file.read_text())
    port = config.get("port") if isinstance(config, dict) else None
    return int(port) if port is not None else None


def login(url: str, username: str, password: str = "") -> str:
    r = requests.post(url + "/api/v1/auth/login", json={"username": username, "password": password})
    r.raise_for_status()
    return str(r.json()["token"])


SINGLE_CONFIG = """
name: test
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length: 100
hyperparameters:
  lr: 0.1
"""


class Run:
    """One allocated trial of a fresh experiment: ids, the admin session, the trial's session."""

    def __init__(self, master: MasterProcess, config: str = SINGLE_CONFIG) -> None:
        self.master = master
        self.admin = master.session()
        r = self.admin.post(master.url + "/api/v1/experiments", json={"config": config})
        assert r.status_code == 200, r.text
        self.experiment_id = int(r.json()["experiment"]["id"])
        trials = self.get(f"/api/v1/experiments/{self.experiment_id}/trials")["trials"]
        self.trial_id = int(trials[0]["id"])
        self.allocate()

    def allocate(self) -> dict[str, Any]:
        r = self.admin.post(
            self.master.url + f"/api/v1/dev/trials/{self.trial_id}/allocate", json={}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        self.allocation_id = str(body["allocationId"])
        self.task_id = str(body["taskId"])
        self.run_id = int(body["runId"])
        self.token = str(body["token"])
        self.trial = self.master.session(self.token, allocation=True)
        return dict(body)

    def exit(self, code: int = 0) -> str:
        r = self.admin.post(
            self.master.url + f"/api/v1/dev/allocations/{self.allocation_id}/exit",
            json={"exitCode": code},
        )
        assert r.status_code == 200, r.text
        return str(r.json()["trialState"])

    def get(self, path: str, **kw: Any) -> Any:
        r = self.admin.get(self.master.url + path, **kw)
        assert r.status_code == 200, r.text
        return r.json()

    def post(self, path: str, json: Any = None, **kw: Any) -> requests.Response:
        """POST as the trial (its allocation token)."""
        return self.trial.post(self.master.url + path, json=json, **kw)

    def metrics(
        self, group: str, steps: int, values: dict[str, Any], **kw: Any
    ) -> requests.Response:
        body = {
            "group": group,
            "metrics": {
                "trialId": self.trial_id,
                "trialRunId": kw.pop("run_id", self.run_id),
                "stepsCompleted": steps,
                "metrics": {"avgMetrics": values, **kw},
            },
        }
        return self.post(f"/api/v1/trials/{self.trial_id}/metrics", json=body)
