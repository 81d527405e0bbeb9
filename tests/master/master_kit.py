"""A real master process on 127.0.0.1 for the master's tests (fixtures in conftest.py)."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import requests

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MasterProcess:
    """``python -m determined.master`` on a free port with its own data dir.

    ``url`` is ``http://127.0.0.1:<port>``; :meth:`kill` sends SIGKILL, :meth:`start` starts it
    again on the same port and data dir (a restart). Without ``cpu_slots`` it runs no trials
    (``--resource-manager none``: tests allocate through the dev endpoints); with it, the local
    resource manager runs them on that many CPU slots.
    """

    def __init__(
        self,
        data_dir: pathlib.Path,
        *,
        db_url: str | None = None,
        cpu_slots: int | None = None,
        slots_per_agent: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.db_url = db_url
        self.slots_per_agent = slots_per_agent
        self.cpu_slots = cpu_slots
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "master.log"

    def start(self, timeout: float = 30.0) -> None:
        cmd = [sys.executable, "-m", "determined.master", "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), "--dev-endpoints"]
        if self.db_url:
            cmd += ["--db-url", self.db_url]
        if self.cpu_slots is None:
            cmd += ["--resource-manager", "none"]
        else:
            cmd += ["--cpu-slots", str(self.cpu_slots)]
        if self.slots_per_agent is not None:
            cmd += ["--slots-per-agent", str(self.slots_per_agent)]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        env["PYTHONPATH"] = str(REPO)
        env["DET_HOME"] = str(self.data_dir)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"master exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                if requests.get(self.url + "/info", timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        self.kill()  # no orphan master when a test gives up on it
        raise RuntimeError(f"master did not answer /info in {timeout}s: {self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def session(self, token: str | None = None, *, allocation: bool = False) -> requests.Session:
        """A requests session; with ``token`` as a user's or an allocation's bearer token."""
        s = requests.Session()
        if token is None:
            token = login(self.url, "admin")
        header = "Grpc-Metadata-x-allocation-token" if allocation else "Authorization"
        s.headers[header] = f"Bearer {token}"
        return s


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
