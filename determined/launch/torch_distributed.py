"""``python -m determined.launch.torch_distributed [TORCHRUN_ARGS...] -- (--trial X | SCRIPT...)``

Starts one worker per slot of this trial (on every container of it) with torchrun, so each
worker can call ``core.DistributedContext.from_torch_distributed()``. Arguments before ``--`` are
passed to torchrun and override ours; ``--trial module:Class`` runs the PyTorchTrial through
``determined.exec.harness``. The chain for each node is::

    pid_server -> torchrun -> (per worker) pid_client -> wrap_rank RANK -> SCRIPT

so every output line carries its rank, and one failing worker stops the others. Exports
``USE_TORCH_DISTRIBUTED=True`` and ``DET_CHIEF_IP`` (the first container's address). Exits with
the chain's exit code.

Without a master (no cluster info) it runs one node with ``--nproc_per_node`` workers (default 1)
and the workers use the local Core API backend, e.g.
``python -m determined.launch.torch_distributed --nproc_per_node 2 -- python train.py``.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from dataclasses import dataclass

import determined as det
from determined.launch import _signals

C10D_PORT = 29400


class UsageError(Exception):
    """The command line cannot be run; the message says why."""


@dataclass(frozen=True)
class Layout:
    """Where this node sits in the trial: the inputs of the torchrun command."""

    nnodes: int
    nproc_per_node: int
    node_rank: int
    master_addr: str
    master_port: int
    allocation_id: str


def parse_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split the command line into (torchrun overrides, script to run per worker)."""
    if "--" in argv:
        i = argv.index("--")
        overrides, rest = argv[:i], argv[i + 1 :]
    else:
        overrides, rest = [], argv
    if rest[:1] == ["--trial"]:
        if len(rest) != 2:
            raise UsageError(
                "--trial takes exactly one module:Class and no script; give either "
                "`-- --trial module:Class` or `-- SCRIPT...`"
            )
        return overrides, [sys.executable, "-m", "determined.exec.harness", rest[1]]
    if not rest:
        raise UsageError("no script to run: give `-- SCRIPT...` or `-- --trial module:Class`")
    return overrides, rest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def layout_from_cluster(info: det.ClusterInfo) -> Layout:
    """The torchrun layout of this container. A one-container trial rendezvouses on a free local
    port; several containers use ``C10D_PORT`` plus the trial's port offset on the chief."""
    addrs = info.container_addrs
    if len(addrs) == 1:
        master_addr, port = "localhost", _free_port()
    else:
        offset = info.trial._unique_port_offset if info.task_type == "TRIAL" else 0
        master_addr, port = addrs[0], C10D_PORT + offset
    return Layout(
        nnodes=len(addrs),
        nproc_per_node=len(info.slot_ids),
        node_rank=info.container_rank,
        master_addr=master_addr,
        master_port=port,
        allocation_id=info.allocation_id,
    )


def _nproc_override(overrides: list[str]) -> int | None:
    for i, arg in enumerate(overrides):
        for flag in ("--nproc_per_node", "--nproc-per-node"):
            if arg == flag and i + 1 < len(overrides):
                value = overrides[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            else:
                continue
            if not value.isdigit():
                raise UsageError(f"{flag} takes a number of workers here, not {value!r}")
            return int(value)
    return None


def local_layout(overrides: list[str]) -> Layout:
    """One node on this machine, without a master: ``--nproc_per_node`` workers (default 1)."""
    return Layout(
        nnodes=1,
        nproc_per_node=_nproc_override(overrides) or 1,
        node_rank=0,
        master_addr="localhost",
        master_port=_free_port(),
        allocation_id=f"local-{os.getpid()}",
    )


def build_command(layout: Layout, overrides: list[str], script: list[str]) -> list[str]:
    """The whole chain as one argv (see the module docstring)."""
    py = sys.executable
    # Per node: the containers of a simulated multi-node trial share one machine. A random
    # tail too: allocation ids repeat across masters (the request id in them comes from
    # experiment_seed, by default the current second), and pid_server replaces a socket that
    # is already there, another run's included.
    pid_socket = f"/tmp/pid_server-{layout.allocation_id}-{layout.node_rank}-{secrets.token_hex(4)}"
    torchrun = [
        py, "-m", "determined.launch._torchrun",  # torchrun, failures reported in one line
        "--nnodes", str(layout.nnodes),
        "--nproc_per_node", str(layout.nproc_per_node),
        "--node_rank", str(layout.node_rank),
        "--max_restarts", "0",
        "--master_addr", layout.master_addr,
        "--master_port", str(layout.master_port),
        *overrides,
    ]  # fmt: skip
    worker = ["--module", "determined.exec.pid_client", pid_socket, "--"]
    worker += [py, "-m", "determined.launch.wrap_rank", "RANK", "--", *script]
    pid_server = [py, "-m", "determined.exec.pid_server", "--on-fail", "SIGTERM"]
    workers = _nproc_override(overrides) or layout.nproc_per_node
    pid_server += ["--on-exit", "WAIT", pid_socket, str(workers), "--"]
    return pid_server + torchrun + worker


def launch_env(info: det.ClusterInfo | None) -> dict[str, str]:
    env = dict(os.environ)
    env["USE_TORCH_DISTRIBUTED"] = "True"
    env["DET_CHIEF_IP"] = info.container_addrs[0] if info is not None else "127.0.0.1"
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    info = det.get_cluster_info()
    try:
        overrides, script = parse_args(argv)
        layout = layout_from_cluster(info) if info is not None else local_layout(overrides)
    except UsageError as e:
        print(f"torch_distributed: {e}", file=sys.stderr)
        return 1
    cmd = build_command(layout, overrides, script)
    proc = subprocess.Popen(cmd, env=launch_env(info))
    _signals.forward_to(proc)
    return _signals.exit_code(proc.wait())


if __name__ == "__main__":
    sys.exit(main())
