"""``python -m determined.master.store copy --to URL (--from URL | --data-dir DIR)``: copy a
store's whole history into another (empty) database, for ``det master migrate-store`` (the
CLI runs the master's store code as a process, never imports it).

Writes ``{"counts": {table: rows}, "source": URL}`` as JSON on stdout (the source's URL with
its password hidden). A copy refused for what the user gave (a target holding another history,
a URL that cannot be used) exits 2 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import sqlalchemy as sa

from determined.master.store import _copy, sqlite_url

REFUSED = 2  # the exit status for a copy refused as asked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m determined.master.store")
    parser.add_argument("command", choices=["copy"])
    parser.add_argument("--to", required=True, help="the target database's URL")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="source", help="the source database's URL")
    source.add_argument("--data-dir", type=pathlib.Path, help="the source: SQLite in DIR")
    args = parser.parse_args(argv)
    url = args.source or sqlite_url(args.data_dir)
    try:
        counts = _copy.copy_store(url, args.to)
    except ValueError as e:
        print(e, file=sys.stderr)
        return REFUSED
    shown = sa.make_url(url).render_as_string()  # the password hidden
    json.dump({"counts": counts, "source": shown}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
