"""torch_distributed: argument rules, the launch chain, and a real 2-worker run
(docs/reference/harness.md §16; §19 items 73-75)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from _kit.launch_env import trial_env

import determined as det
from determined.launch import torch_distributed as td

PY = sys.executable


def test_trial_becomes_the_harness() -> None:
    overrides, script = td.parse_args(["--", "--trial", "model_def:MyTrial"])
    assert overrides == []
    assert script == [PY, "-m", "determined.exec.harness", "model_def:MyTrial"]


def test_arguments_before_the_separator_are_torchrun_overrides() -> None:
    overrides, script = td.parse_args(["--nproc_per_node", "1", "--", "python", "train.py"])
    assert overrides == ["--nproc_per_node", "1"]
    assert script == ["python", "train.py"]


@pytest.mark.e2e
@pytest.mark.parametrize("argv", [["--", "--trial", "a:B", "extra"], ["--"], [], ["--", "--trial"]])
def test_bad_command_lines_exit_1(argv: list[str]) -> None:
    with pytest.raises(td.UsageError):
        td.parse_args(argv)
    out = subprocess.run(
        [PY, "-m", "determined.launch.torch_distributed", *argv], capture_output=True, timeout=60
    )
    assert out.returncode == 1
    assert b"torch_distributed:" in out.stderr


def test_chain_order_and_torchrun_flags() -> None:
    layout = td.Layout(2, 4, 1, "10.0.0.1", 29401, "7.x.1")
    cmd = td.build_command(layout, ["--log_dir", "/tmp/l"], ["python", "train.py"])
    modules = [cmd[i + 1] for i, a in enumerate(cmd) if a in ("-m", "--module")]
    assert modules == [
        "determined.exec.pid_server",
        "determined.launch._torchrun",
        "determined.exec.pid_client",
        "determined.launch.wrap_rank",
    ]
    flags = dict(zip(cmd[::1], cmd[1:], strict=False))
    assert flags["--nnodes"] == "2"
    assert flags["--nproc_per_node"] == "4"
    assert flags["--node_rank"] == "1"
    assert flags["--max_restarts"] == "0"
    assert flags["--master_addr"] == "10.0.0.1"
    assert flags["--master_port"] == "29401"
    # Overrides come after ours (torchrun keeps the last value) and before the worker module.
    assert cmd.index("--log_dir") > cmd.index("--master_port")
    assert cmd.index("--log_dir") < cmd.index("--module")
    assert cmd[-2:] == ["python", "train.py"]
    assert cmd[cmd.index("determined.launch.wrap_rank") + 1] == "RANK"


def test_layout_from_cluster_info(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = trial_env(tmp_path, slots=2, container_addrs=["10.0.0.5", "10.0.0.6"], container_rank=1)
    env["DET_UNIQUE_PORT_OFFSET"] = "3"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    info = det.get_cluster_info()
    assert info is not None
    layout = td.layout_from_cluster(info)
    assert (layout.nnodes, layout.nproc_per_node, layout.node_rank) == (2, 2, 1)
    assert (layout.master_addr, layout.master_port) == ("10.0.0.5", td.C10D_PORT + 3)
    assert td.launch_env(info)["DET_CHIEF_IP"] == "10.0.0.5"
    assert td.launch_env(info)["USE_TORCH_DISTRIBUTED"] == "True"


WORKER = """
import os
from determined import core
dist = core.DistributedContext.from_torch_distributed()
ranks = dist.allgather(dist.get_rank())
print("ranks", ranks, os.environ["USE_TORCH_DISTRIBUTED"], os.environ["DET_CHIEF_IP"], flush=True)
dist.close()
"""


def _run_chain(tmp_path: pathlib.Path, script: str) -> subprocess.CompletedProcess:
    (tmp_path / "worker.py").write_text(script)
    env = {**os.environ, **trial_env(tmp_path, slots=2)}
    return subprocess.run(
        [PY, "-m", "determined.launch.torch_distributed", "--", PY, "worker.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=180,
    )


@pytest.mark.e2e
def test_two_workers_run_with_rank_prefixes(tmp_path: pathlib.Path) -> None:
    out = _run_chain(tmp_path, WORKER)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    lines = sorted(line for line in out.stdout.decode().splitlines() if "ranks" in line)
    assert lines == [
        "[rank=0] ranks [0, 1] True 127.0.0.1",
        "[rank=1] ranks [0, 1] True 127.0.0.1",
    ]


@pytest.mark.e2e
def test_a_failing_rank_fails_the_launch_and_its_log_is_visible(tmp_path: pathlib.Path) -> None:
    script = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('rank one breaks', file=sys.stderr, flush=True); sys.exit(3)\n"
        "time.sleep(120)\n"
    )
    out = _run_chain(tmp_path, script)
    assert out.returncode != 0
    assert b"[rank=1] rank one breaks" in out.stderr


LOCAL_WORKER = """
import sys
from determined import core
dist = core.DistributedContext.from_torch_distributed()
with core.init(distributed=dist, checkpoint_storage=sys.argv[1]) as ctx:
    assert ctx.info is None  # the local backend
    ranks = ctx.distributed.allgather(ctx.distributed.get_rank())
    with ctx.checkpoint.store_path({"steps_completed": 1}, shard=True) as (path, sid):
        (path / f"rank{ctx.distributed.get_rank()}").write_text("x")
    print("ranks", ranks, sid, flush=True)
"""


@pytest.mark.e2e
def test_off_the_master_with_the_local_core_backend(tmp_path: pathlib.Path) -> None:
    """Issue 5 scope 4: no DET_* environment; torchrun's --nproc_per_node sets the workers."""
    (tmp_path / "worker.py").write_text(LOCAL_WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["DET_HOME"] = str(tmp_path / "home")
    out = subprocess.run(
        [PY, "-m", "determined.launch.torch_distributed", "--nproc_per_node", "2", "--",
         PY, "worker.py", str(tmp_path / "ckpts")],
        cwd=tmp_path, env=env, capture_output=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    lines = sorted(x for x in out.stdout.decode().splitlines() if "ranks" in x)
    assert [x.split()[:4] for x in lines] == [
        ["[rank=0]", "ranks", "[0,", "1]"],
        ["[rank=1]", "ranks", "[0,", "1]"],
    ]
    storage_id = lines[0].split()[-1]
    assert {p.name for p in (tmp_path / "ckpts" / storage_id).iterdir()} >= {"rank0", "rank1"}


@pytest.mark.e2e
def test_a_bad_worker_count_is_refused() -> None:
    out = subprocess.run(
        [PY, "-m", "determined.launch.torch_distributed", "--nproc_per_node", "two", "--", "x"],
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert b"--nproc_per_node" in out.stderr


def test_the_pid_socket_is_unique_per_launch() -> None:
    """Allocation ids repeat across masters on one machine: each launch gets a socket of its
    own, and its pid_server and pid_clients agree on it."""
    layout = td.Layout(1, 2, 0, "localhost", 29401, "1.same-id.1")
    sockets = []
    for _ in range(2):
        cmd = td.build_command(layout, [], ["python", "train.py"])
        server = cmd[cmd.index("WAIT") + 1]
        client = cmd[cmd.index("determined.exec.pid_client") + 1]
        assert server == client and server.startswith("/tmp/pid_server-1.same-id.1-0-")
        sockets.append(server)
    assert sockets[0] != sockets[1]
