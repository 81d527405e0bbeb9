"""Issue #35: tasks run as their user's OS identity when the master runs as root (0.37's
``det user link-with-agent-user``, the workspace's ``--agent-uid/gid/user/group``); the 0.37
e2e tests test_link_with_agent_user, test_link_with_large_uid,
test_link_with_existing_agent_user and test_agent_user_group, ported to a real master with
real bubblewrap and a real OS account made by the fixture (resources/_identity.py)."""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess

from determined.master.resources import _sandbox

pytestmark = pytest.mark.e2e

ID_COMMAND = "echo $(id -u -n):$(id -u):$(id -g -n):$(id -g)"


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    if os.geteuid() != 0:
        pytest.skip("a master runs tasks as other OS users only when it runs as root")
    bwrap = shutil.which("bwrap")
    if bwrap is None or _sandbox._probe(bwrap) is not None:
        pytest.skip("needs a working bubblewrap (scripts/setup.sh --tests installs it)")
    args = ["--task-isolation", "bubblewrap"]
    with MasterProcess(tmp_path_factory.mktemp("ids") / "m", cpu_slots=1, args=args) as m:
        yield m


def _create(m: MasterProcess, name: str) -> None:
    r = m.session().post(m.url + "/api/v1/users", json={"user": {"username": name}})
    assert r.status_code == 200, r.text


def _linked(m: MasterProcess, home: pathlib.Path, name: str, *link: str) -> Det:
    admin = Det(home / "admin", m.url, user="admin")
    _create(m, name)
    admin.ok("user", "link-with-agent-user", name, *link)
    return Det(home / name, m.url, user=name)


def _id_of_command(det: Det, *more: str) -> str:
    return det.ok("cmd", "run", *more, ID_COMMAND)


def test_link_with_agent_user(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    link = ["--agent-uid", "200", "--agent-gid", "300"]
    det = _linked(master, tmp_path, "linked1", *link, "--agent-user", "someuser",
                  "--agent-group", "somegroup")  # fmt: skip
    assert "someuser:200:somegroup:300" in _id_of_command(det)
    # The SDK's User.link_with_agent, as 0.37's test does it too.
    from determined.experimental import client

    _create(master, "linked2")
    d = client.Determined(master=master.url, user="admin", password="")
    d.get_user_by_name("linked2").link_with_agent(
        agent_uid=210, agent_gid=310, agent_user="anyuser", agent_group="anygroup"
    )
    again = Det(tmp_path / "linked2", master.url, user="linked2")
    assert "anyuser:210:anygroup:310" in _id_of_command(again)
    # An unlinked user's command runs as the master's own user, a bad link is refused.
    plain = Det(tmp_path / "admin", master.url, user="admin")
    bad = plain("user", "link-with-agent-user", "linked2", "--agent-uid", "-1", "--agent-gid",
                "1", "--agent-user", "x", "--agent-group", "y")  # fmt: skip
    assert bad.returncode != 0 and "agentUid" in bad.stderr


def test_link_with_large_uid(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    big = "2000000000"
    det = _linked(master, tmp_path, "biguid", "--agent-uid", big, "--agent-gid", big,
                  "--agent-user", "someuser", "--agent-group", "somegroup")  # fmt: skip
    assert f"someuser:{big}:somegroup:{big}" in _id_of_command(det)


@pytest.fixture
def os_account() -> Iterator[tuple[int, str]]:
    """A real OS account (useradd), removed afterwards (not the default task account's uid,
    65533, which the Slurm resource manager makes on the host)."""
    name = "det_existing35"
    try:
        pwd.getpwnam(name)
        made = False
    except KeyError:
        subprocess.run(["useradd", "-u", "65530", "-U", "-M", name], check=True)
        made = True
    try:
        yield pwd.getpwnam(name).pw_uid, name
    finally:
        if made:
            subprocess.run(["userdel", name], check=False)


def test_link_with_existing_agent_user(
    master: MasterProcess, tmp_path: pathlib.Path, os_account: tuple[int, str]
) -> None:
    uid, name = os_account
    gid = pwd.getpwnam(name).pw_gid
    det = _linked(master, tmp_path, "existing", "--agent-uid", str(uid), "--agent-gid",
                  str(gid), "--agent-user", name, "--agent-group", name)  # fmt: skip
    out = _id_of_command(det, "--config", "resources.slots=0")
    assert f"{name}:{uid}:{name}:{gid}" in out
    # Its files on the host are the account's: a command writes into its work dir.
    who = det.ok("cmd", "run", "touch mine && stat -c %u:%g mine")
    assert f"{uid}:{gid}" in who


def test_agent_user_group(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    """The workspace's agent user/group wins over the user's (0.37)."""
    admin = Det(tmp_path / "admin", master.url, user="admin")
    admin.ok("workspace", "create", "ws35", "--agent-uid", "1001", "--agent-gid", "1002",
             "--agent-user", "wsuser", "--agent-group", "wsgroup")  # fmt: skip
    det = _linked(master, tmp_path, "inws", "--agent-uid", "200", "--agent-gid", "300",
                  "--agent-user", "someuser", "--agent-group", "somegroup")  # fmt: skip
    assert "wsuser:1001:wsgroup:1002" in _id_of_command(det, "-w", "ws35")
    assert "someuser:200:somegroup:300" in _id_of_command(det)


def test_a_workspace_that_sets_only_a_group_keeps_the_users_uid(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    """A workspace's partial agent user/group overrides only the fields it names (0.37's
    e2e test_workspace_post_gid: gid and group only), over the user's link or the default."""
    admin = Det(tmp_path / "admin", master.url, user="admin")
    admin.ok("workspace", "create", "wsgid", "--agent-gid", "1234", "--agent-group", "group1234")
    det = _linked(master, tmp_path, "gidonly", "--agent-uid", "201", "--agent-gid", "301",
                  "--agent-user", "someuser2", "--agent-group", "somegroup2")  # fmt: skip
    assert "someuser2:201:group1234:1234" in _id_of_command(det, "-w", "wsgid")
    assert "someuser2:201:somegroup2:301" in _id_of_command(det)
    assert ":group1234:1234" in _id_of_command(admin, "-w", "wsgid")  # unlinked: the default's uid


def test_non_root_shell(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    """A linked user's shell: its sshd runs as that user and logs them in (0.37's test)."""
    if not shutil.which("ssh") or not os.access("/usr/sbin/sshd", os.X_OK):
        pytest.skip("needs OpenSSH (scripts/setup.sh --tests installs it)")
    det = _linked(master, tmp_path, "shelluser", "--agent-uid", "1234", "--agent-gid", "1234",
                  "--agent-user", "someuser", "--agent-group", "somegroup")  # fmt: skip
    shell_id = det.ok("shell", "start", "-d").strip().splitlines()[-1]
    deadline = time.monotonic() + 60
    while True:
        r = det("shell", "open", shell_id, "--", "bash", "-c", f"'echo; {ID_COMMAND}'")
        if "someuser:1234:somegroup:1234" in r.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)  # sshd may still be starting
    assert "someuser:1234:somegroup:1234" in r.stdout, r.stdout + r.stderr
    # 0.37's own det opens it as its e2e test does: ssh -tt, a pty that the non-root sshd
    # gives the tty group (it failed with "chown(/dev/pts/0, 1234, 5) failed" before).
    from _kit.reference import REF, Ref

    if (REF / "bin" / "det").exists():
        ref = Ref(master, tmp_path / "ref")
        ref.env["DET_USER"] = "shelluser"
        out = ref.det("shell", "open", shell_id, "--", "bash", "-c", f"echo; {ID_COMMAND}")
        assert "someuser:1234:somegroup:1234" in out, out
    det.ok("shell", "kill", shell_id)


def test_an_unlinked_users_tasks_run_as_the_default_account(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    """A root master never runs an unlinked user's task as root: it runs as
    ``security.default_task`` (det_nobody, 65533, unless configured), an admin's too; its trial
    checkpoints into the default storage in the master's data dir."""
    _create(master, "unlinked")
    det = Det(tmp_path / "unlinked", master.url, user="unlinked")
    assert "det_nobody:65533:det_nobody:65533" in _id_of_command(det)
    admin = Det(tmp_path / "admin", master.url, user="admin")
    assert "det_nobody:65533:det_nobody:65533" in _id_of_command(admin)
    from _kit.trial_cluster import Cluster, config

    cluster = Cluster(master)
    cfg = config(tmp_path / "out", max_length=2)
    cfg["entrypoint"] = "python3 train.py"
    cfg.pop("checkpoint_storage", None)  # the default: <data dir>/checkpoints
    cfg["hyperparameters"]["out"] = "/tmp/out"  # the trial's own /tmp
    exp_id = cluster.create(cfg)
    cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=120)
    [trial] = cluster.trials(exp_id)
    [ckpt] = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    stored = master.data_dir / "checkpoints" / ckpt["uuid"]
    assert stored.stat().st_uid == 65533
    assert oct(master.data_dir.stat().st_mode & 0o777) == "0o700"


def test_default_task_root_is_the_operators_choice(tmp_path: pathlib.Path) -> None:
    """0.37's default (tasks as root, its e2e test_link_without_agent_user) only where the
    operator configures it: ``security.default_task`` in the master config."""
    if os.geteuid() != 0:
        pytest.skip("a master runs tasks as other OS users only when it runs as root")
    conf = tmp_path / "master.yaml"
    conf.write_text(
        "task_isolation: bubblewrap\ncpu_slots: 1\nsecurity:\n  default_task:\n"
        "    user: root\n    uid: 0\n    group: root\n    gid: 0\n"
    )
    with MasterProcess(tmp_path / "m", config_file=conf) as m:
        _create(m, "plain")
        det = Det(tmp_path / "plain", m.url, user="plain")
        assert "root:0:root:0" in _id_of_command(det)
    bad = tmp_path / "bad.yaml"
    bad.write_text("security:\n  default_task:\n    user: root\n    uid: -1\n")
    cmd = [sys.executable, "-m", "determined.master", "--config-file", str(bad)]
    cmd += ["--data-dir", str(tmp_path / "b")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "default_task" in done.stderr, done.stderr


def test_the_default_account_on_the_host_is_made_or_renamed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Slurm resource manager needs the default task account on its host
    (``_identity.ensure_account``): made where neither its ids nor its names exist; an earlier
    setup's account of the old name (``det-nobody``, not a word: 0.37's e2e tests parse ``id``
    with ``\\w+``) renamed, with its group; an id another account holds left alone. Real
    accounts (``useradd``), under test names."""
    import grp

    from determined.master.resources import _identity

    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("makes host accounts: needs root and useradd")
    assert _identity.DEFAULT_TASK.user == "det_nobody" == _identity.DEFAULT_TASK.group
    monkeypatch.setattr(_identity, "OLD_DEFAULT_NAME", "det-old36")
    new = _identity.Identity(64036, 64036, "det_new36", "det_new36")

    def gone() -> None:
        for name in ("det_new36", "det-old36"):
            subprocess.run(["userdel", name], capture_output=True)
            subprocess.run(["groupdel", name], capture_output=True)

    gone()
    try:
        assert "made the host account det_new36" in " ".join(_identity.ensure_account(new))
        assert pwd.getpwnam("det_new36")[2:4] == (64036, 64036)
        assert grp.getgrgid(64036).gr_name == "det_new36"
        assert _identity.ensure_account(new) == []  # nothing left to do
        gone()
        subprocess.run(["groupadd", "-g", "64036", "det-old36"], check=True)
        subprocess.run(["useradd", "-u", "64036", "-g", "64036", "-M", "det-old36"], check=True)
        done = " ".join(_identity.ensure_account(new))
        assert "renamed the host account det-old36 to det_new36" in done, done
        assert pwd.getpwuid(64036).pw_name == "det_new36"
        assert grp.getgrgid(64036).gr_name == "det_new36"
        gone()
        subprocess.run(["useradd", "-u", "64036", "-U", "-M", "someone36"], check=True)
        try:
            done = " ".join(_identity.ensure_account(new))
            assert "uid 64036 is the host account 'someone36'" in done, done
            assert pwd.getpwuid(64036).pw_name == "someone36"
        finally:
            subprocess.run(["userdel", "someone36"], check=False)
            subprocess.run(["groupdel", "someone36"], capture_output=True)
    finally:
        gone()


def test_search_permission_reaches_a_path_and_lists_nothing(tmp_path: pathlib.Path) -> None:
    """``_identity.grant_search`` (a Slurm job submitted for a task's OS user): that uid opens
    a path below directories closed to it (0700, the master's), by name only: it lists none of
    them, reads no file there the mode closes, and another uid gets nothing."""
    from determined.master.resources import _identity

    if os.geteuid() != 0:
        pytest.skip("gives another uid permissions: needs root")
    base = pathlib.Path(tempfile.mkdtemp(prefix="det-acl35-"))  # pytest's dir is chmodded
    try:
        data = base / "data"
        (data / "work" / "own").mkdir(parents=True)
        for d in (data, data / "work"):
            d.chmod(0o700)
        (data / "master.db").write_text("secret")
        (data / "master.db").chmod(0o600)
        (data / "work" / "own" / "f").write_text("mine")
        os.chown(data / "work" / "own", 64037, 64037)
        _identity.grant_search([data / "work" / "own"], 64037)

        def as_uid(uid: int, *cmd: str) -> int:
            args = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
            return subprocess.run(args, capture_output=True).returncode

        assert as_uid(64037, "cat", str(data / "work" / "own" / "f")) == 0
        assert as_uid(64037, "ls", str(data)) != 0  # search, not read
        assert as_uid(64037, "ls", str(data / "work")) != 0
        assert as_uid(64037, "cat", str(data / "master.db")) != 0
        assert as_uid(64038, "cat", str(data / "work" / "own" / "f")) != 0
        assert oct(data.stat().st_mode & 0o777) == "0o710"  # the ACL's mask; group entry ---
    finally:
        shutil.rmtree(base, ignore_errors=True)
