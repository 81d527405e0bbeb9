"""``python -m determined.launch.wrap_rank [--no-redirect-stdio] RANK SCRIPT...``

Runs SCRIPT and copies its stdout and stderr line by line, each line prefixed with ``[rank=N] ``,
so the logs of many workers can be told apart. A line ends at ``\\n``, ``\\r`` or ``\\r\\n`` and is
written with ``\\n`` (progress bars redraw with ``\\r``). RANK is an integer, or a comma-separated
list of environment variable names whose first set value is the rank (e.g.
``RANK,OMPI_COMM_WORLD_RANK``). When the files ``/run/determined/train/logs/std{out,err}.log``
exist (Determined's containers), the unprefixed output is also appended there unless
``--no-redirect-stdio`` is given.

Exits with SCRIPT's exit code (128 + N when a signal N killed it). INT, TERM, HUP, USR1 and USR2
received by this process are forwarded to SCRIPT.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
from typing import BinaryIO

from determined.launch import _signals

LOG_DIR = "/run/determined/train/logs"
_LINE_END = re.compile(rb"\r\n|\r|\n")
# Output with no line end for this long is passed on as a line of its own (bounded memory).
MAX_LINE = 65536


def resolve_rank(spec: str, environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The rank named by ``spec``: an integer as-is, else the first set variable of a
    comma-separated list of names. Raises ValueError when none is set."""
    if spec.isdigit():
        return spec
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for name in names:
        value = environ.get(name)
        if value is not None and value != "":
            return value
    raise ValueError(
        f"RANK {spec!r} is neither an integer nor the name of a set environment variable "
        f"(checked: {', '.join(names) or 'nothing'})"
    )


def copy_lines(src: BinaryIO, dst: BinaryIO, prefix: bytes, tee: BinaryIO | None = None) -> None:
    """Copy ``src`` to ``dst`` until EOF, prefixing every line. ``\n``, ``\r`` and ``\r\n`` each
    end a line, written with ``\n``: a progress bar's redraws become separate tagged lines, and
    no bare ``\r`` reaches the log to hide a line behind another rank's. A final unterminated
    line is copied too, and a line longer than ``MAX_LINE`` bytes is cut into lines."""
    pending = b""
    while True:
        chunk = src.read1(65536) if hasattr(src, "read1") else src.read(65536)
        if not chunk:
            break
        if tee is not None:
            tee.write(chunk)
            tee.flush()
        pending += chunk
        start = 0
        for m in _LINE_END.finditer(pending):
            if m.group() == b"\r" and m.end() == len(pending):
                break  # a "\r\n" may be split across reads: decide once more has come
            dst.write(prefix + pending[start : m.start()] + b"\n")
            start = m.end()
        pending = pending[start:]
        while len(pending) >= MAX_LINE:
            dst.write(prefix + pending[:MAX_LINE] + b"\n")
            pending = pending[MAX_LINE:]
        dst.flush()
    if pending:
        dst.write(prefix + pending.removesuffix(b"\r") + b"\n")
        dst.flush()


def _open_tee(name: str, redirect: bool) -> BinaryIO | None:
    path = os.path.join(LOG_DIR, name)
    if not redirect or not os.path.exists(path):
        return None
    return open(path, "ab")  # noqa: SIM115 - closed by the copying thread's owner below


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m determined.launch.wrap_rank")
    parser.add_argument("--no-redirect-stdio", dest="redirect", action="store_false")
    parser.add_argument("rank", help="an integer, or comma-separated environment variable names")
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        parser.error("no SCRIPT to run")
    try:
        rank = resolve_rank(args.rank)
    except ValueError as e:
        print(f"wrap_rank: {e}", file=sys.stderr)
        return 1

    prefix = f"[rank={rank}] ".encode()
    proc = subprocess.Popen(script, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _signals.forward_to(proc)
    tees = [_open_tee("stdout.log", args.redirect), _open_tee("stderr.log", args.redirect)]
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=copy_lines, args=(proc.stdout, sys.stdout.buffer, prefix, tees[0])),
        threading.Thread(target=copy_lines, args=(proc.stderr, sys.stderr.buffer, prefix, tees[1])),
    ]
    for t in threads:
        t.start()
    code = proc.wait()
    for t in threads:
        t.join()
    for tee in tees:
        if tee is not None:
            tee.close()
    return _signals.exit_code(code)


if __name__ == "__main__":
    sys.exit(main())
