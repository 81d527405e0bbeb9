"""Entry point of ``det``.

Only ``det --version`` exists so far; the experiment, trial, checkpoint, user and master commands
arrive with the master (issue 7). Unknown commands exit with status 2 and say so.
"""

from __future__ import annotations

import argparse
import sys

from determined import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="det", description="redetermined command line")
    parser.add_argument("--version", action="version", version=f"det {__version__}")
    parser.add_argument("-m", "--master", help="master URL (default: $DET_MASTER)")
    parser.add_argument("command", nargs="?", help="command to run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args, _rest = _parser().parse_known_args(argv)
    if args.command is None:
        _parser().print_help()
        return 0
    print(
        f"det: the {args.command!r} command is not available yet in this release; "
        "see docs/cli.md for the commands that exist",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
