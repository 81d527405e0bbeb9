"""``python -m determined.master --port N [--data-dir D] [--db-url URL]``: serve the master."""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys

from determined.common import _paths


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m determined.master", description=__doc__)
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--data-dir", type=pathlib.Path, default=None, help="default: $DET_HOME")
    p.add_argument("--db-url", default=None, help="SQLAlchemy URL (default: SQLite in data dir)")
    p.add_argument("--cluster-name", default="", help="shown by /info")
    p.add_argument("--dev-endpoints", action="store_true", help="serve /api/v1/dev (tests)")
    p.add_argument("--log-level", default="warning")
    return p


def main(argv: list[str] | None = None) -> int:
    """Open (and migrate) the store, then serve until interrupted."""
    args = _parser().parse_args(argv)
    import uvicorn

    from determined.master._app import create_app
    from determined.master._store import Store, sqlite_url

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    data_dir = (args.data_dir or _paths.data_dir()).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    # Defaults that live in the data dir (checkpoint storage, logs) follow --data-dir.
    os.environ["DET_HOME"] = str(data_dir)
    try:
        store = Store(args.db_url or sqlite_url(data_dir))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    app = create_app(store, cluster_name=args.cluster_name, dev_endpoints=args.dev_endpoints)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
