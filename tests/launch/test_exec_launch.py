"""determined.exec.launch: entrypoint forms, storage check, exit codes
(docs/reference/master.md §2.3; docs/reference/harness.md §16; §19 item 72)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from _kit.launch_env import trial_env
from hypothesis import given
from hypothesis import strategies as st

from determined.exec import launch

PY = sys.executable


@pytest.mark.parametrize("ep", ["model_def:MyTrial", "pkg.mod:Trial_2", "a:b"])
def test_legacy_entrypoints_go_through_torch_distributed(ep: str) -> None:
    assert launch.entrypoint_command(ep) == [
        PY, "-m", "determined.launch.torch_distributed", "--", "--trial", ep
    ]  # fmt: skip


@pytest.mark.parametrize("ep", ["train.py", "a:b.c", "python3 train.py", "a: b", ":B", "a:"])
def test_one_plain_command_is_execed_by_the_shell(ep: str) -> None:
    """exec: a signal reaches the command, not a shell in between (which would die of it)."""
    assert launch.entrypoint_command(ep) == ["sh", "-c", f"exec {ep.strip()}"]


@pytest.mark.parametrize(
    "ep", ["a && b", "python3 x.py; echo done", "X=1 python3 t.py", "echo $HOME", "a | b"]
)
def test_other_strings_run_in_a_shell_as_written(ep: str) -> None:
    assert launch.entrypoint_command(ep) == ["sh", "-c", ep]


def test_lists_run_as_given() -> None:
    assert launch.entrypoint_command(["python3", "train.py", "--x"]) == [
        "python3", "train.py", "--x"
    ]  # fmt: skip


@pytest.mark.parametrize("ep", ["", "  ", [], [1], None])
def test_bad_entrypoints_are_refused(ep: object) -> None:
    with pytest.raises(ValueError, match="entrypoint"):
        launch.entrypoint_command(ep)  # type: ignore[arg-type]


@given(st.text(alphabet="ab._:/ 1", min_size=1, max_size=12))
def test_the_legacy_form_is_exactly_module_colon_name(ep: str) -> None:
    cmd = launch.entrypoint_command(ep) if ep.strip() else None
    if cmd is None:
        return
    module, sep, name = ep.partition(":")
    legacy = (
        sep == ":"
        and module != ""
        and all(c.isalnum() or c in "_." for c in module)
        and name != ""
        and all(c.isalnum() or c == "_" for c in name)
    )
    assert (cmd[:3] == [PY, "-m", "determined.launch.torch_distributed"]) == legacy


def _launch(tmp_path: pathlib.Path, **kw: object) -> subprocess.CompletedProcess:
    env = {**os.environ, **trial_env(tmp_path, **kw)}  # type: ignore[arg-type]
    return subprocess.run(
        [PY, "-m", "determined.exec.launch"], cwd=tmp_path, env=env, capture_output=True,
        timeout=120,
    )  # fmt: skip


@pytest.mark.e2e
def test_runs_a_shell_entrypoint_and_passes_its_exit_code(tmp_path: pathlib.Path) -> None:
    out = _launch(tmp_path, entrypoint="echo hello-from-trial; exit 5")
    assert out.returncode == 5, out.stderr
    assert b"hello-from-trial" in out.stdout
    # 0.37's first log line, which its e2e tests look for.
    assert b"New trial runner in (container " in out.stderr
    # The storage check left nothing behind.
    assert [p.name for p in (tmp_path / "ckpts").iterdir()] == []


@pytest.mark.e2e
def test_unusable_storage_fails_before_the_entrypoint(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the storage directory should be")
    out = _launch(
        tmp_path,
        entrypoint="echo should-not-run",
        storage={"type": "shared_fs", "host_path": str(blocker)},
    )
    assert out.returncode == 1
    assert b"checkpoint storage is not usable" in out.stderr
    assert b"should-not-run" not in out.stdout


@pytest.mark.e2e
def test_refuses_to_run_off_cluster(tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    out = subprocess.run(
        [PY, "-m", "determined.exec.launch"], env=env, capture_output=True, timeout=60
    )
    assert out.returncode == 1
    assert b"started by a master" in out.stderr
