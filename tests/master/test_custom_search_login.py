"""``LocalSearchRunner`` without ``session=`` logs in through the SDK, as 0.37's does
(docs/reference/custom_searchers.md): after ``client.login(...)`` in the script, or with the
token ``det user login`` cached and no ``$DET_USER``/``$DET_PASS``, the searched experiment
belongs to that user. The search shuts down at once: no trial has to run."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess, clean_env

from determined.experimental import client

pytestmark = pytest.mark.e2e

RUNNER = r"""
import json, pathlib, sys
from determined import searcher
from determined.experimental import client

model_dir, login = sys.argv[1], sys.argv[2]
if login != "-":
    client.login(user=login, password="Secret123")

class Nothing(searcher.SearchMethod):
    def initial_operations(self, state):
        return [searcher.Shutdown()]
    def on_trial_created(self, state, request_id):
        return []
    def on_validation_completed(self, state, request_id, metric, train_length):
        return []
    def on_trial_closed(self, state, request_id):
        return []
    def on_trial_exited_early(self, state, request_id, exited_reason):
        return []
    def progress(self, state):
        return 1.0

config = {
    "name": "login-runner",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "custom", "metric": "loss"},
}
runner = searcher.LocalSearchRunner(Nothing(), searcher_dir=pathlib.Path("sdir"))
print(json.dumps({"id": runner.run(config, model_dir=model_dir)}))
"""


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path_factory.mktemp("search-login") / "data", cpu_slots=0) as m:
        admin = client.Determined(master=m.url, user="admin", password="")
        admin.create_user("alice", admin=False, password="Secret123")
        admin.create_user("bob", admin=False, password="Secret123")
        yield m


def _run(master: MasterProcess, home: pathlib.Path, login: str) -> str:
    """Run the runner script with DET_HOME ``home``; the searched experiment's owner."""
    model = home / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "train.py").write_text("print('no trial runs')\n")
    env = clean_env(home)
    env["DET_MASTER"] = master.url
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(model), login],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp_id = json.loads(proc.stdout.strip().splitlines()[-1])["id"]
    body = master.session().get(f"{master.url}/api/v1/experiments/{exp_id}").json()
    assert body["experiment"]["state"] == "STATE_COMPLETED", body["experiment"]["state"]
    return str(body["experiment"]["username"])


def test_the_runner_uses_client_login(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    assert _run(master, tmp_path, "alice") == "alice"


def test_the_runner_uses_the_token_of_det_user_login(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    Det(tmp_path, master.url).ok("user", "login", "bob", input="Secret123\n")
    assert _run(master, tmp_path, "-") == "bob"
