"""Issue 38, "a new user's second hour", with a real master and ``det`` as a subprocess: a
queued command says what it waits for and its output follows the master's start line; task ids
are taken by unique prefix (an ambiguous one names its candidates); a notebook prints its URL
once it answers, and a master without JupyterLab refuses one at launch with the command that
installs it; bad environment variables and storage paths are refused at create; ``det user``
commands say what they did."""

from __future__ import annotations

import collections
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import requests
import yaml
from _kit.cli import Det
from _kit.master import REPO, MasterProcess, clean_env, login

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path_factory.mktemp("second-hour") / "master", cpu_slots=1) as m:
        yield m


@pytest.fixture
def det(master: MasterProcess, tmp_path: pathlib.Path) -> Det:
    return Det(tmp_path / "home", master.url)


@pytest.fixture(scope="module")
def api(master: MasterProcess) -> requests.Session:
    return master.session(login(master.url, "determined"))


def _launch(api: requests.Session, url: str, config: dict) -> requests.Response:
    return api.post(url + "/api/v1/commands", json={"config": config})


def test_a_queued_command_says_what_it_waits_for(
    master: MasterProcess, det: Det, tmp_path: pathlib.Path
) -> None:
    """Items 3 and 5: the wait is explained (slots, who holds them, queue position), and the
    command's output comes after the master's "Resources ... have started" line."""
    blocker = det.ok("cmd", "run", "-d", "sleep", "60").strip()
    env = {**clean_env(tmp_path / "home"), "DET_MASTER": master.url}
    cmd = [sys.executable, "-m", "determined.cli", "cmd", "run", "echo", "after-the-wait"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    assert proc.stdout is not None
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"det cmd run ended early: {lines}"
            lines.append(line.rstrip("\n"))
            if line.startswith("Waiting for"):
                break
        # The blocker goes by its first 8 characters, as det task list shows them.
        assert det.ok("cmd", "kill", blocker[:8]).strip() == f"Killed command {blocker}"
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines += out.splitlines()
    assert proc.returncode == 0, lines
    assert lines[1] == (
        f"Waiting for 1 slot (1 of 1 in use by command {blocker[:8]}); position 1 of 1 in the "
        "queue (det job list)"
    )
    started = next(i for i, x in enumerate(lines) if x.startswith("Resources for Command"))
    assert started < lines.index("after-the-wait"), lines


def test_task_ids_by_unique_prefix(master: MasterProcess, det: Det, api: requests.Session) -> None:
    """Item 4: a prefix names the one task it starts; an ambiguous one is refused with its
    candidates. 17 ids make two share a first character (16 hex digits)."""
    ids = []
    for _ in range(17):
        r = _launch(api, master.url, {"entrypoint": ["true"], "resources": {"slots": 0}})
        assert r.status_code == 200, r.text
        ids.append(r.json()["command"]["id"])
    by_first = collections.defaultdict(list)
    for task_id in ids:
        by_first[task_id[0]].append(task_id)
    shared = next(group for group in by_first.values() if len(group) > 1)
    r = det("cmd", "describe", shared[0][0])
    assert r.returncode == 1
    assert f"command id {shared[0][0]!r} is ambiguous" in r.stderr
    assert all(task_id in r.stderr for task_id in shared), r.stderr
    one = ids[0]
    assert one in det.ok("cmd", "describe", one[:8])
    assert "slots: 0" in det.ok("cmd", "config", one[:10])
    r = det("task", "logs", one[:8])
    assert r.returncode == 0, r.stderr
    # A prefix nothing starts goes to the master as given: its answer names it.
    r = det("notebook", "logs", "zzzz")
    assert r.returncode == 1 and "zzzz" in r.stderr


def test_a_commands_own_dash_c_is_explained(det: Det) -> None:
    """``-c`` is det's context directory (as 0.37's): a command's own ``-c`` before ``--`` is
    explained, not reported as a missing model definition directory."""
    r = det("cmd", "run", "python", "-c", "print(1)")
    assert r.returncode == 1
    assert r.stderr == (
        "det: -c/--context 'print(1)' is not a directory: -c names the context directory to "
        "upload. For a command's own -c, put the command after -- (det cmd run -- python -c "
        "'print(1)') or quote it as one argument\n"
    )
    assert det.ok("cmd", "run", "--", "python", "-c", "print('own -c')").count("own -c") == 1


def test_bad_environment_variables_are_refused_at_create(
    master: MasterProcess, api: requests.Session
) -> None:
    """Item 7: a NUL byte (no process environment holds one) and an empty name are refused
    when the command is created, naming the entry; nothing is queued."""
    before = len(api.get(master.url + "/api/v1/commands").json()["commands"])
    for value, words in (
        ("BAD=a\x00b", ["NUL byte", "'BAD=a\\x00b'"]),
        ("=value", ["no name", "'=value'"]),
    ):
        env = {"environment_variables": ["GOOD=1", value]}
        r = _launch(api, master.url, {"entrypoint": ["true"], "environment": env})
        assert r.status_code == 400, r.text
        for word in words:
            assert word in r.json()["message"], r.text
    r = _launch(
        api,
        master.url,
        {"entrypoint": ["true"], "environment": {"environment_variables": {"cpu": ["X=\x00"]}}},
    )
    assert r.status_code == 400 and "environment_variables.cpu" in r.json()["message"]
    assert len(api.get(master.url + "/api/v1/commands").json()["commands"]) == before


def test_a_storage_path_out_of_host_path_is_refused_at_create(
    master: MasterProcess, api: requests.Session, tmp_path: pathlib.Path
) -> None:
    """Item 7: refused with a 400 naming both paths, not at the trial's start; nothing is
    registered."""
    before = api.get(master.url + "/api/v1/experiments").json()["pagination"]["total"]
    config = {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": 1},
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": str(tmp_path),
            "storage_path": "../../elsewhere",
        },
    }
    body = {"config": yaml.safe_dump(config), "modelDefinition": [], "activate": False}
    r = api.post(master.url + "/api/v1/experiments", json=body)
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert "storage_path='../../elsewhere'" in message and f"host_path='{tmp_path}'" in message
    assert api.get(master.url + "/api/v1/experiments").json()["pagination"]["total"] == before


def test_user_commands_say_what_they_did(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    """Item 5: 0.37's det user create and change-password print nothing on success."""
    admin = Det(tmp_path / "admin", master.url, user="admin")
    out = admin.ok("user", "create", "newcomer", "--password", "Newcomer-pw1")
    assert out.startswith("Created user 'newcomer' (id ")
    assert out.rstrip().endswith("log in with `det user login newcomer`")
    out = admin.ok("user", "change-password", "newcomer", input="Changed-pw2\nChanged-pw2\n")
    assert out == "Changed the password of user 'newcomer'\n"
    assert login(master.url, "newcomer", "Changed-pw2")
    assert admin.ok("user", "deactivate", "newcomer") == "Deactivated user 'newcomer'\n"
    assert admin.ok("user", "activate", "newcomer") == "Activated user 'newcomer'\n"


def test_a_notebook_prints_its_url_once_it_answers(
    master: MasterProcess, det: Det, api: requests.Session
) -> None:
    """Item 1: with --no-browser the URL is printed too, once JupyterLab answers through the
    master's proxy; the notebook is then killed by the prefix of its id."""
    pytest.importorskip("jupyterlab")
    r = det("notebook", "start", "--no-browser")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    task_id = lines[0].removeprefix("Launched notebook (id: ").removesuffix(").")
    url = f"{master.url}/proxy/{task_id}/"
    assert lines[-1] == (
        f"Open it at {url} (log in to the master's web UI first: the proxy asks for it)"
    )
    assert api.get(url + "api/status", timeout=10).status_code == 200  # it answers already
    assert det.ok("notebook", "kill", task_id[:8]).strip() == f"Killed notebook {task_id}"


def test_no_jupyterlab_refuses_the_notebook_at_launch(tmp_path: pathlib.Path) -> None:
    """Item 1: a master whose Python cannot import JupyterLab refuses ``det notebook start``
    with the command that installs the extra, and queues nothing."""
    hidden = tmp_path / "hide"
    (hidden / "jupyterlab").mkdir(parents=True)
    (hidden / "jupyterlab" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'jupyterlab'\")\n"
    )
    env = {"PYTHONPATH": f"{hidden}:{REPO}"}
    with MasterProcess(tmp_path / "master", cpu_slots=1, env=env) as m:
        r = Det(tmp_path / "home", m.url)("notebook", "start", "--no-browser")
        assert r.returncode == 1
        assert "notebooks need JupyterLab" in r.stderr
        assert "No module named 'jupyterlab'" in r.stderr
        # This master runs from this clone: the extra comes from it (an editable install).
        assert f"-m pip install -e '{REPO}[notebook]'" in r.stderr
        assert "Launched" not in r.stdout
        assert m.session().get(m.url + "/api/v1/notebooks").json()["notebooks"] == []
