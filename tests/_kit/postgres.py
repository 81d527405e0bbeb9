"""A throwaway PostgreSQL server for the store tests: Debian's ``postgresql`` package
(``scripts/setup.sh --tests`` installs it), ``initdb`` into a temporary directory with trust
auth and no fsync of the initial files, listening only on a Unix socket there. Each test gets a
fresh database (``CREATE DATABASE`` takes a few milliseconds); the server lives for the session.
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import uuid

import psycopg


def _bindir() -> pathlib.Path | None:
    """The newest ``/usr/lib/postgresql/<N>/bin`` with initdb, or initdb on PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return pathlib.Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return pathlib.Path(on_path).parent if on_path else None


def unavailable_reason() -> str | None:
    """Why no server can start here (None: it can)."""
    if _bindir() is None:
        return (
            "PostgreSQL is not installed: run scripts/setup.sh --tests (apt-get install "
            "postgresql) to run the store tests against it too"
        )
    return None


class PostgresServer:
    """One private server; :meth:`new_database` hands out fresh databases.

    Args:
        durable: fsync on, as a production server (``benchmarks/master_metrics.py
            --postgres``); off (the default) for tests, which never outlive the machine.
    """

    def __init__(self, durable: bool = False) -> None:
        self.durable = durable
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError(unavailable_reason())
        self._bin = bindir
        # initdb refuses to run as root: the server runs as the postgres user then.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="redet-pg-"))
        self.dir.chmod(0o777)  # the server's user writes its socket and data here
        self._lock = threading.Lock()

    def start(self) -> None:
        data = self.dir / "data"
        self._run(
            self._bin / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        # No TCP: a Unix socket in our own directory, so parallel sessions never collide.
        options = f"-k {self.dir} -c listen_addresses=''"
        if not self.durable:
            options += " -c fsync=off"
        self._run(self._bin / "pg_ctl", "-D", data, "-o", options, "-l", self.dir / "pg.log",
                  "-w", "start")  # fmt: skip

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` (psycopg 3, the Unix socket)."""
        return f"postgresql+psycopg://postgres@/{database}?host={self.dir}"

    def new_database(self) -> str:
        """A new empty database; its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        with self._lock, psycopg.connect(host=str(self.dir), user="postgres",
                                         dbname="postgres", autocommit=True) as conn:  # fmt: skip
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if (self.dir / "data" / "postmaster.pid").exists():
            self._run(self._bin / "pg_ctl", "-D", self.dir / "data", "-m", "immediate", "-w",
                      "stop", check=False)  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)

    def _run(self, *args: object, check: bool = True) -> None:
        proc = subprocess.run(
            [*self._as, *map(str, args)], capture_output=True, text=True, timeout=120
        )
        if check and proc.returncode != 0:
            log = self.dir / "pg.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {proc.stdout}{proc.stderr}{tail}")
