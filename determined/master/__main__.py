"""``python -m determined.master [--config-file F] --port N [--data-dir D] [--db-url URL]``:
serve the master.

``--config-file`` names a YAML file whose keys are the long options with ``_`` for ``-``
(``port``, ``db_url``, ``cpu_slots``, ...); options given on the command line win.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys
from typing import TYPE_CHECKING, Any

from determined._version import __version__
from determined.common import _paths
from determined.master._interpreter_tuning import tune_gc, tune_gil

if TYPE_CHECKING:  # imported when it serves, not for --help
    from determined.master._app import MasterApp


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m determined.master", description=__doc__)
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--allowed-hosts",
        default="",
        help="comma-separated host names requests may name in their Host header, besides "
        "127.0.0.1, localhost, ::1 and --host (DNS rebinding defence)",
    )
    p.add_argument("--data-dir", type=pathlib.Path, default=None, help="default: $DET_HOME")
    p.add_argument("--db-url", default=None, help="SQLAlchemy URL (default: SQLite in data dir)")
    p.add_argument("--cluster-name", default="", help="shown by /info")
    p.add_argument("--dev-endpoints", action="store_true", help="serve /api/v1/dev (tests)")
    p.add_argument(
        "--cpu-slots",
        type=int,
        default=None,
        help="run trials on this many CPU slots (default: one per GPU, else one per core)",
    )
    p.add_argument(
        "--slots-per-agent",
        type=int,
        default=None,
        help="split the slots into simulated agents of N; a trial needing more runs one "
        "process group per agent (a multi-node job on one machine)",
    )
    p.add_argument(
        "--resource-manager",
        choices=("local", "none", "slurm"),
        default="local",
        help="'none': run no trials (the dev endpoints allocate them by hand)",
    )
    p.add_argument("--log-level", default="warning")
    p.add_argument(
        "--log-retention-days",
        type=int,
        default=-1,
        help="days to keep an ended trial's logs (-1: forever; det t set log-retention "
        "overrides it per trial)",
    )
    p.add_argument(
        "--log-retention-schedule",
        default="24h",
        help="how often to drop logs past their retention, as a Go duration (default 24h)",
    )
    p.add_argument(
        "--read-workers",
        type=int,
        default=2,
        help="processes that answer the heavy reads (experiment list and details, metric "
        "series) beside the master's own, which keeps a busy master's metric ingestion "
        "responsive (default 2; 0: the master answers them itself)",
    )
    p.add_argument(
        "--write-worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="commit the trials' metric reports in a process of their own, beside the "
        "master's event loop (default on; --no-write-worker: in the master)",
    )
    p.add_argument(
        "--unmanaged-trial-timeout",
        default="5m",
        help="mark a running unmanaged (core_v2) trial ERROR when its process has sent nothing "
        "(no heartbeat) for this long, as a Go duration (default 5m, as 0.37)",
    )
    p.add_argument(
        "--task-isolation",
        choices=("auto", "bubblewrap", "none"),
        default="auto",
        help="the sandbox of trial and task processes (docs/security.md): 'auto' (default) "
        "bubblewrap when it works here, else none, running only admins' and 'determined''s "
        "tasks; 'bubblewrap' required; 'none' every user's tasks unsandboxed",
    )
    p.add_argument(
        "--default-task",
        default=None,
        metavar="USER:UID:GROUP:GID",
        help="the OS account an unlinked user's tasks run as when the master runs as root with "
        "a sandbox (0.37's security.default_task; default det_nobody:65533:det_nobody:65533; "
        "root:0:root:0 is 0.37's own default, docs/security.md)",
    )
    p.add_argument("--config-file", type=pathlib.Path, default=None, help="YAML master config")
    return p


# Options a config file may set (the rest only make sense on a command line).
_FILE_KEYS = {
    "port": int,
    "host": str,
    "allowed_hosts": str,  # a YAML list or a comma-separated string
    "data_dir": pathlib.Path,
    "db_url": str,
    "cluster_name": str,
    "cpu_slots": int,
    "slots_per_agent": int,
    "resource_manager": str,  # or a mapping: {type: slurm, ...} (docs/deploy/slurm.md)
    "log_level": str,
    "webhooks": dict,  # {signing_key, base_url}
    "retention_policy": dict,  # {log_retention_days, schedule}
    "unmanaged_trial_timeout": str,  # a Go duration
    "task_isolation": str,  # auto, bubblewrap or none (resources/_sandbox.py)
    "security": dict,  # {default_task: {user, uid, group, gid}} (resources/_identity.py)
    # 0.37's defaults of every task's container, the master's and each pool's
    # (experiment/_container_defaults.py)
    "task_container_defaults": dict,
    "resource_pools": list,
}
_WEBHOOK_KEYS = ("signing_key", "base_url")


def _file_defaults(path: pathlib.Path) -> dict[str, Any]:
    """The options in a master config file, checked. Raises ValueError saying what to fix."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"cannot read master config {str(path)!r}: {e}") from e
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"master config {str(path)!r} must be a YAML mapping of options")
    unknown = sorted(str(k) for k in raw if k not in _FILE_KEYS)
    if unknown:
        raise ValueError(
            f"master config {str(path)!r}: unknown keys {', '.join(unknown)}; allowed: "
            f"{', '.join(sorted(_FILE_KEYS))}"
        )
    out: dict[str, Any] = {}
    for key, value in raw.items():
        kind = _FILE_KEYS[key]
        if key == "retention_policy":
            out.update(_retention_section(path, value))
            continue
        if key == "security":
            out.update(_security_section(path, value))
            continue
        if key in ("task_container_defaults", "resource_pools"):
            out[key] = value  # checked below, with each other
            continue
        if kind is dict:
            out[key] = _webhooks_section(path, value)
            continue
        if key == "resource_manager" and isinstance(value, dict):
            rm_type = value.get("type")
            if rm_type not in ("local", "slurm"):
                raise ValueError(
                    f"master config {str(path)!r}: resource_manager.type must be local or "
                    f"slurm, not {rm_type!r}"
                )
            out["resource_manager"] = rm_type
            if rm_type == "slurm":
                from determined.master.resources._slurm_jobs import SlurmConfig, SlurmConfigError

                try:
                    SlurmConfig.parse(value)
                except (SlurmConfigError, TypeError) as e:
                    raise ValueError(f"master config {str(path)!r}: {e}") from e
                out["slurm"] = value
            continue
        if value is None or (
            kind is int and (isinstance(value, bool) or not isinstance(value, int))
        ):
            if value is not None:
                raise ValueError(f"master config {str(path)!r}: {key} must be an integer")
            continue
        if key == "allowed_hosts" and isinstance(value, list):
            value = ",".join(str(v) for v in value)
        out[key] = kind(value)
    if "task_container_defaults" in out or "resource_pools" in out:
        from determined.master.experiment import ContainerDefaults, ContainerDefaultsError

        try:
            ContainerDefaults.parse(out.get("task_container_defaults"), out.get("resource_pools"))
        except ContainerDefaultsError as e:
            raise ValueError(f"master config {str(path)!r}: {e}") from e
    return out


def _webhooks_section(path: pathlib.Path, value: Any) -> dict[str, str]:
    """``webhooks: {signing_key: ..., base_url: ...}``, both strings, both optional."""
    if value is None:
        return {}
    bad = not isinstance(value, dict) or any(
        k not in _WEBHOOK_KEYS or not isinstance(v, str) for k, v in value.items()
    )
    if bad:
        raise ValueError(
            f"master config {str(path)!r}: webhooks must map {' and '.join(_WEBHOOK_KEYS)} to "
            f"strings, not {value!r}"
        )
    return dict(value)


def _security_section(path: pathlib.Path, value: Any) -> dict[str, Any]:
    """0.37's ``security`` section: ``default_task`` only (TLS, SSH key size and authz are
    not options of this master)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) - {"default_task"}:
        raise ValueError(
            f"master config {str(path)!r}: security takes default_task ({{user, uid, group, "
            f"gid}}) only, not {value!r}"
        )
    if value.get("default_task") is None:
        return {}
    from determined.master.resources._identity import parse_default_task

    try:
        found = parse_default_task(value["default_task"])
    except ValueError as e:
        raise ValueError(f"master config {str(path)!r}: {e}") from e
    return {"default_task": f"{found.user}:{found.uid}:{found.group}:{found.gid}"}


def _retention_section(path: pathlib.Path, value: Any) -> dict[str, Any]:
    """0.37's ``retention_policy: {log_retention_days: N, schedule: ...}``; the schedule is a
    Go duration here (0.37 also takes a cron line)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) - {"log_retention_days", "schedule"}:
        raise ValueError(
            f"master config {str(path)!r}: retention_policy takes log_retention_days and "
            f"schedule, not {value!r}"
        )
    out: dict[str, Any] = {}
    days = value.get("log_retention_days")
    if days is not None:
        if isinstance(days, bool) or not isinstance(days, int) or not -1 <= days <= 32767:
            raise ValueError(
                f"master config {str(path)!r}: retention_policy.log_retention_days must be an "
                f"integer from -1 (forever) to 32767, not {days!r}"
            )
        out["log_retention_days"] = days
    if value.get("schedule") is not None:
        out["log_retention_schedule"] = str(value["schedule"])
    return out


_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves only this machine."""
    return host in _LOOPBACK or host.startswith("127.")


def _private_data_dir(data_dir: pathlib.Path, db_url: str | None) -> None:
    """The data dir 0700 and the SQLite database 0600 (a database holds password and token
    hashes and experiment configs with their storage secrets): made so, or an existing data
    dir of this user's closed to others (``det`` itself may have made it, for its logins). An
    existing database is left as its owner set it."""
    if not data_dir.exists():
        data_dir.mkdir(parents=True, mode=0o700)
    if data_dir.stat().st_uid == os.geteuid():
        data_dir.chmod(0o700)  # mkdir's mode is masked by the umask
    if db_url is None:
        db = data_dir / "master.db"
        if not db.exists():
            os.close(os.open(db, os.O_CREAT | os.O_WRONLY, 0o600))
            db.chmod(0o600)


def blank_password_refusal(host: str, blank: list[str]) -> str | None:
    """Why a master must not serve on ``host`` (not loopback) while the default users
    ``blank`` have no password, or None when it may."""
    if is_loopback(host) or not blank:
        return None
    names = " and ".join(repr(b) for b in blank)
    return (
        f"refusing to serve on {host}: user(s) {names} have a blank password, so anyone who "
        "can reach this address could log in as them. Start the master on 127.0.0.1 first "
        "(`det master up`), set passwords with `det user login admin` then "
        "`det user change-password admin` (and `det user change-password determined`, or "
        "`det user deactivate determined`), then start it on this address again"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command line over config file over built-in defaults."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.config_file is not None:
        try:
            parser.set_defaults(**_file_defaults(args.config_file))
        except ValueError as e:
            parser.error(str(e))
        args = parser.parse_args(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    """Open (and migrate) the store, then serve until interrupted."""
    args = parse_args(argv)
    from determined.master._app import create_app
    from determined.master.store import Store, sqlite_url

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    data_dir = (args.data_dir or _paths.data_dir()).expanduser().resolve()
    # Whatever the master creates (work/, envs/, logs, checkpoints of the default storage)
    # is its own: 0700 directories, 0600 files. Tasks get the usual 022 back (_launcher).
    os.umask(0o077)
    _private_data_dir(data_dir, args.db_url)
    # Defaults that live in the data dir (checkpoint storage, logs) follow --data-dir.
    os.environ["DET_HOME"] = str(data_dir)
    try:
        store = Store(args.db_url or sqlite_url(data_dir))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from determined.master.store import _users

    with store.read() as conn:
        refusal = blank_password_refusal(args.host, _users.blank_password_users(conn))
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    from determined.master._go_duration import parse_go_duration

    try:
        retention_every = parse_go_duration(args.log_retention_schedule).total_seconds()
    except ValueError as e:
        print(f"error: --log-retention-schedule: {e}", file=sys.stderr)
        return 2
    try:
        unmanaged_timeout = parse_go_duration(args.unmanaged_trial_timeout).total_seconds()
        if unmanaged_timeout <= 0:
            raise ValueError(f"{args.unmanaged_trial_timeout!r} is not a positive duration")
    except ValueError as e:
        print(f"error: --unmanaged-trial-timeout: {e}", file=sys.stderr)
        return 2
    local = args.resource_manager in ("local", "slurm")
    from determined.master import resources
    from determined.master.resources._identity import parse_default_task

    try:
        default_task = None
        if args.default_task is not None:
            default_task = parse_default_task(args.default_task)
        sandbox = resources.configure_sandbox(args.task_isolation, data_dir, default_task)
    except (resources.SandboxError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if local and not sandbox.active and args.task_isolation != "none":
        print(
            f"warning: tasks run without a sandbox: {sandbox.describe()['detail']} "
            "(docs/security.md)",
            file=sys.stderr,
        )
    from determined.master.experiment import ContainerDefaults

    container_defaults = ContainerDefaults.parse(
        getattr(args, "task_container_defaults", None), getattr(args, "resource_pools", None)
    )
    slurm = getattr(args, "slurm", None)
    if args.resource_manager == "slurm" and slurm is None:
        slurm = {"type": "slurm"}
    app = create_app(
        store,
        cluster_name=args.cluster_name,
        dev_endpoints=args.dev_endpoints,
        master_url=_reachable_url(args.host, args.port) if local else None,
        work_root=data_dir / "work" if local else None,
        cpu_slots=args.cpu_slots,
        slots_per_agent=args.slots_per_agent,
        webhooks_config=getattr(args, "webhooks", None),
        host=args.host,
        allowed_hosts=args.allowed_hosts.split(","),
        slurm=slurm if args.resource_manager == "slurm" else None,
        log_retention_days=args.log_retention_days,
        log_retention_every=retention_every,
        read_workers=args.read_workers,
        write_worker=args.write_worker,
        unmanaged_trial_timeout=unmanaged_timeout,
        sandbox=sandbox if local else None,
        container_defaults=container_defaults,
    )
    app.services.master_config = {**shown_config(args, data_dir), **container_defaults.shown()}
    from determined.master import _log_buffer

    app.services.master_log = _log_buffer.install()
    logging.getLogger("determined.master").info(
        "master %s serving on %s:%d, data dir %s", __version__, args.host, args.port, data_dir
    )
    _serve(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def shown_config(args: argparse.Namespace, data_dir: pathlib.Path) -> dict[str, Any]:
    """The effective options as ``GET /api/v1/master/config`` shows them (0.37's master.yaml
    layout where a key carries over), the database password redacted."""
    from sqlalchemy.engine import make_url

    from determined.master.store import sqlite_url

    return {
        "cluster_name": args.cluster_name,
        "port": args.port,
        "host": args.host,
        "root": str(data_dir),
        "db": {"url": make_url(args.db_url or sqlite_url(data_dir)).render_as_string()},
        "resource_manager": {
            "type": args.resource_manager,
            "cpu_slots": args.cpu_slots,
            "slots_per_agent": args.slots_per_agent,
        },
        "log": {"level": args.log_level, "color": False},
        "retention_policy": {
            "log_retention_days": args.log_retention_days,
            "schedule": args.log_retention_schedule,
        },
        "unmanaged_trial_timeout": args.unmanaged_trial_timeout,
        "task_isolation": args.task_isolation,
        "config_file": str(args.config_file) if args.config_file else None,
        # 0.37's master.yaml list of opt-in features; the /stream websocket is always on here.
        "feature_switches": ["streaming_updates"],
    }


def _reachable_url(host: str, port: int) -> str:
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _serve(app: MasterApp, **options: Any) -> None:
    import uvicorn

    services = app.services

    class Server(uvicorn.Server):
        """Stops the trial processes as soon as SIGTERM/SIGINT arrives, before draining."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            if services.rm is not None:
                services.rm.terminate_all()
            services.signals.wake_all()
            super().handle_exit(sig, frame)

    from determined.master._http_protocol import CoalescingHttpToolsProtocol
    from determined.master._ws_protocol import PlainTextWSProtocol

    options.setdefault("http", CoalescingHttpToolsProtocol)
    options.setdefault("ws", PlainTextWSProtocol)
    # The trials' long polls must not hold the shutdown for long.
    config = uvicorn.Config(app, access_log=False, timeout_graceful_shutdown=2, **options)
    tune_gc()
    tune_gil()
    # Forked now, while this process has one thread (the read workers' pool starts one).
    if services.write_worker is not None:
        services.write_worker.start()
    services.reads.start()
    Server(config).run()


if __name__ == "__main__":
    sys.exit(main())
