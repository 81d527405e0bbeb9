"""Start-up cost of ``det`` and the master: the CPU (user + system) each takes, which a loaded
machine disturbs much less than wall time (issue 33: importing any layer ran the whole Core API).

For each tree (this checkout, and ``--baseline DIR``, an old tree from ``git archive`` or a
worktree, put first on ``PYTHONPATH``), taking turns ``--rounds`` times:

* ``det --help``: the CLI's start;
* ``import determined.common.api``: what every client layer loads;
* the master's own process from ``python -m determined.master`` until ``/info`` answers.

    .venv/bin/python benchmarks/startup.py --rounds 7
    mkdir /tmp/old && git archive <rev> | tar -x -C /tmp/old
    .venv/bin/python benchmarks/startup.py --baseline /tmp/old
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
DET = pathlib.Path(sys.executable).with_name("det")
TICK = os.sysconf("SC_CLK_TCK")


def _env(tree: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DET_MASTER"}
    env["PYTHONPATH"] = str(tree)
    return env


def _child_cpu(cmd: list[str], tree: pathlib.Path) -> float:
    """CPU seconds of ``cmd`` (run to its end) and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=_env(tree), stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _master_cpu(tree: pathlib.Path) -> float:
    """CPU seconds of the master's own process until ``/info`` answers (its workers not
    counted)."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        cmd = [sys.executable, "-m", "determined.master", "--data-dir", data_dir]
        cmd += ["--port", str(port), "--cpu-slots", "1"]
        proc = subprocess.Popen(
            cmd, env=_env(tree), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 120
            while not _answers(f"http://127.0.0.1:{port}/info"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the master from {tree} did not start")
                time.sleep(0.02)
            fields = pathlib.Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / TICK
        finally:
            proc.terminate()
            proc.wait(30)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--baseline", type=pathlib.Path, default=None, help="an old tree to compare")
    args = p.parse_args()
    trees = {"this": REPO} | ({"baseline": args.baseline} if args.baseline else {})
    probes: dict[str, Callable[[pathlib.Path], float]] = {
        "det --help": lambda t: _child_cpu([str(DET), "--help"], t),
        "import determined.common.api": lambda t: _child_cpu(
            [sys.executable, "-c", "import determined.common.api"], t
        ),
        "master process until /info": _master_cpu,
    }
    cpu: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            for probe, run in probes.items():
                cpu.setdefault((probe, name), []).append(run(tree))
    print(f"CPU (user + system), median of {args.rounds}; load average {os.getloadavg()[0]:.1f}")
    for probe in probes:
        line = f"{probe:30s}"
        for name in trees:
            line += f"  {name} {statistics.median(cpu[(probe, name)]) * 1000:6.0f} ms"
        if args.baseline:
            ratio = statistics.median(cpu[(probe, "this")]) / statistics.median(
                cpu[(probe, "baseline")]
            )
            line += f"  ratio this/baseline {ratio:4.2f}x"
        print(line)


if __name__ == "__main__":
    main()
