"""``det tensorboard``: TensorBoard over experiments' trials' event files.

Trials in TensorBoard AUTO mode copy their event files to
``<checkpoint storage>/<cluster id>/tensorboard/experiment/<e>/trial/<t>/`` while they run
(``determined.tensorboard``). By default ``start`` asks the master to run TensorBoard as a task
behind its proxy (``determined.cli._ntsc``, as 0.37). With ``--local`` (the fallback,
docs/tasks.md) this command asks the master where the files are for each trial and runs
``tensorboard`` on this machine over those directories, one run per trial (``trial_<t>``, or
``exp_<e>_trial_<t>`` for several experiments), in the foreground (Ctrl-C stops it). A
directory storage (``shared_fs``, ``directory``) is read in place; from ``s3`` or ``gcs`` the
trials' files are downloaded into a temporary directory first and again every ``--refresh``
seconds while TensorBoard runs (new and grown files only).
"""

from __future__ import annotations

import argparse
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any

from determined.cli import _ntsc, _render, _session, _task_ids
from determined.common import storage
from determined.common.api import _routes
from determined.tensorboard import get_sync_path


class CloudMirror:
    """Local copies of trials' event files kept in a bucket: ``add`` one trial's prefix,
    ``pull`` copies what is new or grown into ``root/<run name>``."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.sources: dict[str, tuple[storage.CloudStorageManager, str]] = {}

    def add(self, name: str, manager: storage.CloudStorageManager, prefix: str) -> pathlib.Path:
        self.sources[name] = (manager, prefix)
        return self.root / name

    def pull(self) -> int:
        """Copy new and grown files of every trial; returns how many were copied."""
        copied = 0
        for name, (manager, prefix) in self.sources.items():
            (self.root / name).mkdir(parents=True, exist_ok=True)
            copied += manager.get_files(prefix, self.root / name)
        return copied

    def keep_pulling(self, interval: float, stop: threading.Event) -> None:
        while not stop.wait(interval):
            try:
                self.pull()
            except Exception as e:  # a flaky bucket must not end the TensorBoard session
                print(f"det: refreshing TensorBoard files failed: {e}", file=sys.stderr)


def trial_dirs(
    sess: Any,
    experiment_ids: list[int],
    trial_ids: list[int] | None = None,
    mirror: CloudMirror | None = None,
) -> dict[str, pathlib.Path]:
    """Run name -> the directory holding that trial's synced event files (it may not exist
    yet: TensorBoard picks files up as they appear). Trials in s3/gcs storage are added to
    ``mirror`` and get its local directory; without a mirror they are refused."""
    cluster_id = str(_routes.get_info(sess)["cluster_id"])
    found: dict[str, pathlib.Path] = {}
    for exp_id in experiment_ids:
        exp = _routes.get_experiment(sess, exp_id)
        config = (exp.get("config") or {}).get("checkpoint_storage") or {}
        try:
            manager = storage.build(config)
        except Exception as e:
            raise _render.CliError(f"experiment {exp_id}: bad checkpoint_storage: {e}") from e
        cloud = isinstance(manager, storage.CloudStorageManager) and mirror is not None
        if not cloud and not isinstance(manager, storage.DirectoryStorageManager):
            raise _render.CliError(
                f"experiment {exp_id} keeps its files in {config.get('type')!r} storage; "
                "TensorBoard reads shared_fs and directory storage in place, and s3/gcs "
                f"through a download of the {cluster_id}/tensorboard/experiment/{exp_id} "
                "prefix (pass a CloudMirror)"
            )
        trials = _routes.list_experiment_trials(sess, exp_id)["trials"]
        for trial in trials:
            if trial_ids and int(trial["id"]) not in trial_ids:
                continue
            name = f"trial_{trial['id']}"
            if len(experiment_ids) > 1:
                name = f"exp_{exp_id}_{name}"
            rel = get_sync_path(cluster_id, exp_id, int(trial["id"]))
            if isinstance(manager, storage.CloudStorageManager) and mirror is not None:
                found[name] = mirror.add(name, manager, str(rel))
            elif isinstance(manager, storage.DirectoryStorageManager):
                found[name] = pathlib.Path(manager.base_path) / rel
    if not found:
        raise _render.CliError(f"no trials found in experiment(s) {experiment_ids}")
    return found


def tensorboard_command(dirs: dict[str, pathlib.Path], host: str, port: int) -> list[str]:
    spec = ",".join(f"{name}:{path}" for name, path in sorted(dirs.items()))
    return [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir_spec",
        spec,
        "--host",
        host,
        "--port",
        str(port),
    ]


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def cmd_start(args: argparse.Namespace) -> None:
    """``det tensorboard start --local``: TensorBoard on this machine, in the foreground."""
    if not args.experiment_ids:
        raise _render.CliError("give the experiment IDs whose trials TensorBoard shows")
    sess = _session.session(args)
    with tempfile.TemporaryDirectory(prefix="det-tensorboard-") as tmp:
        mirror = CloudMirror(pathlib.Path(tmp))
        dirs = trial_dirs(sess, args.experiment_ids, args.trial_ids, mirror)
        stop = threading.Event()
        if mirror.sources:
            try:
                copied = mirror.pull()
            except Exception as e:
                raise _render.CliError(f"cannot download the trials' TensorBoard files: {e}") from e
            print(f"Downloaded {copied} TensorBoard file(s) from storage into {tmp}", flush=True)
            threading.Thread(
                target=mirror.keep_pulling, args=(args.refresh, stop), daemon=True
            ).start()
        cmd = tensorboard_command(dirs, args.host, args.port)
        url = f"http://{args.host}:{args.port}/"
        print(f"TensorBoard over {len(dirs)} trial(s) at {url}", flush=True)
        proc = subprocess.Popen(cmd)
        # SIGTERM ends det as Ctrl-C does: TensorBoard stopped, downloaded copies removed.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            code = proc.wait(10)
        finally:
            stop.set()
    sys.exit(code)


def _start(args: argparse.Namespace) -> None:
    if args.local:
        cmd_start(args)
    else:
        _ntsc.cmd_start_tensorboard(args)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tensorboard", help="view experiments' trials in TensorBoard")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    s = cmds.add_parser(
        "start",
        help="start TensorBoard over the experiments' trials as a task on the master, served "
        "through its proxy (--local: run it here in the foreground instead)",
    )
    s.add_argument("experiment_ids", type=int, nargs="*", metavar="EXP_ID", help="experiment IDs")
    s.add_argument(
        "--local",
        action="store_true",
        help="run TensorBoard on this machine (the fallback: reads s3/gcs storage too)",
    )
    s.add_argument("-d", "--detach", action="store_true", help="print the ID and return")
    s.add_argument("--no-browser", action="store_true", help="do not open a browser")
    s.add_argument("--config-file", default=None, help="a YAML task config")
    s.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("-t", "--trial-ids", type=int, nargs="+", default=None, help="only these trials")
    _ntsc.add_context_args(s)
    _ntsc.workspace_arg(s, "to launch in (default: Uncategorized)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=6006, help="port (default 6006)")
    s.add_argument(
        "--refresh",
        type=float,
        default=10.0,
        help="s3/gcs storage: seconds between downloads of new event files (default 10)",
    )
    s.set_defaults(func=_start)
    op = cmds.add_parser("open", help="open a TensorBoard in the browser")
    op.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    op.set_defaults(func=_ntsc.cmd_open, kind="tensorboard")
    _ntsc.common_manage(cmds, "tensorboard", "TensorBoard")
