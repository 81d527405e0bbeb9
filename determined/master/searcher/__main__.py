"""``python -m determined.master.searcher preview``: the preview of a search, for ``det
preview-search`` (the CLI runs the master's search code as a process, never imports it).

Reads ``{"searcher": {...}, "hyperparameters": {...}, "seed": N}`` as JSON on stdin; writes
``{"preview": Preview.to_dict(), "text": Preview.render()}`` as JSON on stdout. A searcher
config the search refuses exits 2 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from determined import errors
from determined.master.searcher import preview

INVALID_CONFIG = 2  # the exit status for a refused searcher config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m determined.master.searcher")
    parser.add_argument("command", choices=["preview"])
    parser.parse_args(argv)
    asked = json.load(sys.stdin)
    try:
        found = preview(asked["searcher"], asked.get("hyperparameters"), int(asked["seed"]))
    except errors.InvalidSearcherConfig as e:
        print(e, file=sys.stderr)
        return INVALID_CONFIG
    json.dump({"preview": found.to_dict(), "text": found.render()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
