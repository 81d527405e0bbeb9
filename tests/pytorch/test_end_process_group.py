"""How init() ends a process group it started (docs/pytorch.md, "Process-group teardown"):
ranks meet in a bounded barrier, then the group is destroyed; a peer that never comes does
not hold a rank for the group's 30-minute default. Two real gloo processes."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

from _kit.master import free_port

ROOT = pathlib.Path(__file__).parents[2]  # this checkout's determined, not an installed one

SCRIPT = """
import os, sys
import torch.distributed as tdist
from determined.pytorch import _trainer

_trainer._END_BARRIER_S = 3
tdist.init_process_group("gloo")
tdist.barrier()
if tdist.get_rank() == 1 and sys.argv[1] == "vanish":
    os._exit(0)  # gone after its last collective, without ending the group
_trainer._end_process_group(clean=True)
print("ended", tdist.is_initialized(), flush=True)
"""


def _run(mode: str) -> list[subprocess.CompletedProcess[str]]:
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, mode],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def test_both_ranks_end_the_group_and_exit_cleanly() -> None:
    for r in _run("both"):
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "ended False"
        assert "terminate called" not in r.stderr


def test_a_vanished_peer_delays_the_end_by_the_bounded_barrier_only() -> None:
    t0 = time.monotonic()
    chief, _ = _run("vanish")
    assert time.monotonic() - t0 < 60
    assert chief.returncode == 0, chief.stderr
    assert chief.stdout.strip() == "ended False"
    assert "did not all meet before ending the process group" in chief.stderr
