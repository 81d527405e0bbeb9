"""``det tensorboard start EXP_ID...``: TensorBoard over experiments' trials' event files.

Trials in TensorBoard AUTO mode copy their event files to
``<checkpoint storage>/<cluster id>/tensorboard/experiment/<e>/trial/<t>/`` while they run
(``determined.tensorboard``). This command asks the master where that is for each trial and runs
``tensorboard`` on this machine over those directories, one run per trial (``trial_<t>``, or
``exp_<e>_trial_<t>`` for several experiments). It differs from the reference, which starts
TensorBoard as a task on the cluster behind the master's proxy: here it is a local process in
the foreground (Ctrl-C stops it), so the storage must be a directory this machine can read
(``shared_fs`` or ``directory``).
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
from typing import Any

from determined.cli import _render, _session
from determined.common import storage
from determined.tensorboard import get_sync_path


def trial_dirs(
    sess: Any, experiment_ids: list[int], trial_ids: list[int] | None = None
) -> dict[str, pathlib.Path]:
    """Run name -> the directory holding that trial's synced event files (it may not exist
    yet: TensorBoard picks files up as they appear)."""
    cluster_id = str(sess.get("/info").json()["cluster_id"])
    found: dict[str, pathlib.Path] = {}
    for exp_id in experiment_ids:
        exp = sess.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]
        config = (exp.get("config") or {}).get("checkpoint_storage") or {}
        try:
            manager = storage.build(config)
        except Exception as e:
            raise _render.CliError(f"experiment {exp_id}: bad checkpoint_storage: {e}") from e
        if not isinstance(manager, storage.DirectoryStorageManager):
            raise _render.CliError(
                f"experiment {exp_id} keeps its files in {config.get('type')!r} storage; "
                "det tensorboard reads shared_fs or directory storage only: copy the "
                f"{cluster_id}/tensorboard/experiment/{exp_id} prefix to a local directory and "
                "run `tensorboard --logdir` on it"
            )
        trials = sess.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
        for trial in trials:
            if trial_ids and int(trial["id"]) not in trial_ids:
                continue
            name = f"trial_{trial['id']}"
            if len(experiment_ids) > 1:
                name = f"exp_{exp_id}_{name}"
            rel = get_sync_path(cluster_id, exp_id, int(trial["id"]))
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


def cmd_start(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    dirs = trial_dirs(sess, args.experiment_ids, args.trial_ids)
    cmd = tensorboard_command(dirs, args.host, args.port)
    print(f"TensorBoard over {len(dirs)} trial(s) at http://{args.host}:{args.port}/", flush=True)
    proc = subprocess.Popen(cmd)
    try:
        sys.exit(proc.wait())
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait(10)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tensorboard", help="view experiments' trials in TensorBoard")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    s = cmds.add_parser(
        "start",
        help="run TensorBoard here over the experiments' trials (foreground; Ctrl-C stops it)",
    )
    s.add_argument("experiment_ids", type=int, nargs="+", metavar="EXP_ID", help="experiment IDs")
    s.add_argument("-t", "--trial-ids", type=int, nargs="+", default=None, help="only these trials")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=6006, help="port (default 6006)")
    s.set_defaults(func=cmd_start)
