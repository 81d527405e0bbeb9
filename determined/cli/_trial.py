"""``det trial`` (alias ``t``): describe, logs, kill, download, support-bundle, set
log-retention."""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
import tarfile
import tempfile
from typing import Any

from determined import errors
from determined.cli import _checkpoint, _describe, _logs, _master, _render, _session, _settings
from determined.common.api import _routes


def cmd_describe(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    body = _routes.get_trial_response(sess, args.trial_id)
    trial = body["trial"]
    items = _describe.workloads(sess, args.trial_id, args, batch_metrics=args.metrics)
    if args.json:
        _render.print_json(dict(body, workloads=items or []))
        return
    row = [
        trial.get("experimentId"),
        _render.strip_state(trial.get("state")),
        json.dumps(trial.get("hparams"), indent=4),
        json.dumps(trial.get("summaryMetrics"), indent=4),
        _render.format_time(trial.get("startTime")),
        _render.format_time(trial.get("endTime")),
    ]
    _render.table(_describe.TRIAL_DESCRIBE_HEADERS, [row], as_csv=args.csv)
    print()
    print("Workloads:")
    if items is None:
        print("(this master does not serve GET /api/v1/trials/{id}/workloads yet)")
    else:
        headers, rows = _describe.trial_workload_table(items, metrics=args.metrics)
        _render.table(headers, rows, as_csv=args.csv)
    if args.metrics_summary:
        _render.print_json(trial.get("summaryMetrics"))


def cmd_logs(args: argparse.Namespace) -> None:
    if args.follow and (args.head is not None or args.tail is not None):
        raise _render.CliError("use at most one of --follow, --head and --tail")
    sess = _session.session(args)
    ended = f"Trial log stream ended. To reopen log stream, run: det trial logs -f {args.trial_id}"
    watcher = None
    if args.follow and not args.json:
        watcher = _logs.Watcher(_session.session(args), trial_id=args.trial_id)
        watcher.start()
    causes = _logs.CauseFinder()
    try:
        if not args.follow and not args.json:
            # A failed trial's cause first: one line above the logs that explain it.
            state = _routes.get_trial(sess, args.trial_id).get("state")
            if state == "STATE_ERROR":
                for _ in causes.watch(_logs.trial_logs(sess, args.trial_id)):
                    if causes.cause is not None:
                        break
                _logs.report_failure(sess, args.trial_id, causes.cause)
        entries = _logs.trial_logs(
            sess,
            args.trial_id,
            follow=args.follow,
            head=args.head,
            tail=args.tail,
            filters=_logs.filters_of(args),
        )
        _logs.print_logs(causes.watch(entries), as_json=args.json)
        if watcher is not None:
            watcher.stop()
            _logs.report_failure(sess, args.trial_id, causes.cause)
    except errors.MasterError:
        raise  # a missing trial (404) or a refused request: the error's message alone
    except BaseException:
        print(ended, file=sys.stderr)  # Ctrl-C: the stream can be reopened
        raise
    print(ended, file=sys.stderr)


def cmd_kill(args: argparse.Namespace) -> None:
    _routes.kill_trial(_session.session(args), args.trial_id)
    print(f"Killed trial {args.trial_id}")


def _pick_checkpoint(args: argparse.Namespace, ckpts: list[dict[str, Any]]) -> dict[str, Any]:
    done = [c for c in ckpts if _render.strip_state(c.get("state")) == "COMPLETED"]
    if args.uuid:
        found = [c for c in ckpts if c.get("uuid") == args.uuid]
        if not found:
            raise _render.CliError(f"trial {args.trial_id} has no checkpoint {args.uuid}")
        return found[0]
    if not done:
        raise _render.CliError(f"trial {args.trial_id} has no completed checkpoint")
    if args.best:
        config = (done[0].get("training") or {}).get("experimentConfig") or {}
        searcher = config.get("searcher") or {}
        metric = str(searcher.get("metric") or "")
        smaller = bool(searcher.get("smaller_is_better", True))
        if args.sort_by is not None:
            metric, smaller = args.sort_by, bool(args.smaller_is_better)
        best = _checkpoint.best_checkpoints(done, metric, smaller, 1)
        if not best:
            raise _render.CliError(
                f"no checkpoint of trial {args.trial_id} has a validation of {metric!r}; "
                "use --latest"
            )
        return best[0]
    return max(done, key=lambda c: int((c.get("metadata") or {}).get("steps_completed") or 0))


def cmd_download(args: argparse.Namespace) -> None:
    """``det t download T (--latest | --best | --uuid U) [-o DIR] [-q]``."""
    if args.sort_by is not None and not args.best:
        raise _render.CliError("--sort-by and --smaller-is-better can only be used with --best")
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise _render.CliError("--sort-by and --smaller-is-better must be set together")
    sess = _session.session(args)
    body = _routes.list_trial_checkpoints(sess, args.trial_id)
    ckpt = _pick_checkpoint(args, list(body.get("checkpoints") or []))
    out = pathlib.Path(args.output_dir or pathlib.Path("checkpoints") / str(ckpt["uuid"]))
    path = _checkpoint.download(sess, ckpt, out)
    if args.quiet:
        print(path)
    else:
        _checkpoint.render_checkpoint(ckpt, path)


def _write_bundle_files(sess: Any, trial_id: int, into: pathlib.Path) -> list[pathlib.Path]:
    """The four files 0.37 bundles: trial logs, master logs, the trial and its experiment."""
    trial_logs = into / "trial_logs.txt"
    with trial_logs.open("w") as f:
        for entry in _logs.trial_logs(sess, trial_id):
            f.write(str(entry.get("message") or ""))
    master_logs = into / "master_logs.txt"
    with master_logs.open("w") as f:
        try:
            for line in _master.master_log_lines(sess):
                f.write(line + "\n")
        except errors.MasterError as e:  # only admins read the master's log
            f.write(f"the master's log could not be read: {e}\n")
    trial = _routes.get_trial(sess, trial_id)
    exp = _routes.get_experiment_response(sess, trial["experimentId"])
    api_trial = into / "api_trial_call.json"
    api_trial.write_text(json.dumps(trial))
    api_experiment = into / "api_experiment_call.json"
    api_experiment.write_text(json.dumps(exp))
    return [trial_logs, master_logs, api_trial, api_experiment]


def cmd_support_bundle(args: argparse.Namespace) -> None:
    """``det t support-bundle T [-o DIR]``: ``det-bundle-trial-T-<time>.tar.gz`` for a bug
    report, as 0.37 writes it."""
    sess = _session.session(args)
    out_dir = pathlib.Path(args.output_dir or ".")
    if not out_dir.is_dir():
        raise _render.CliError(f"cannot write the bundle: output directory {out_dir} not found")
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    name = f"det-bundle-trial-{args.trial_id}-{stamp}"
    target = out_dir / f"{name}.tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        files = _write_bundle_files(sess, args.trial_id, pathlib.Path(tmp))
        partial = target.with_name(target.name + ".part")
        with tarfile.open(partial, "w:gz") as bundle:
            for path in files:
                bundle.add(path, arcname=f"{name}/{path.name}")
        partial.replace(target)  # no half-written bundle under the final name
    print(f"bundle path: {target.resolve()}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", aliases=["t"], help="manage trials")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    d = cmds.add_parser("describe", help="describe trial")
    d.add_argument("trial_id", type=int, help="trial ID")
    d.add_argument("--metrics-summary", action="store_true", help="print the summary metrics")
    d.add_argument("--metrics", action="store_true", help="display full metrics")
    _describe.add_pagination_args(d, limit=1000)
    fmt = d.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print as JSON")
    fmt.add_argument("--csv", action="store_true", help="print as CSV")
    d.set_defaults(func=cmd_describe)
    lg = cmds.add_parser("logs", help="fetch trial logs")
    lg.add_argument("trial_id", type=int, help="trial ID")
    _logs.add_log_args(lg)
    lg.set_defaults(func=cmd_logs)
    k = cmds.add_parser("kill", help="forcibly terminate a trial")
    k.add_argument("trial_id", type=int, help="trial ID")
    k.set_defaults(func=cmd_kill)
    st = cmds.add_parser("set", help="set trial attributes")
    _settings.add_log_retention(
        st.add_subparsers(dest="set_command", metavar="COMMAND", required=True), "trial"
    )
    sb = cmds.add_parser("support-bundle", help="support bundle of a trial: logs and config")
    sb.add_argument("trial_id", type=int, help="trial ID")
    sb.add_argument("-o", "--output-dir", default=None, help="where to write the bundle")
    sb.set_defaults(func=cmd_support_bundle)
    dl = cmds.add_parser("download", help="download a checkpoint of a trial")
    dl.add_argument("trial_id", type=int, help="trial ID")
    which = dl.add_mutually_exclusive_group(required=True)
    which.add_argument("--latest", action="store_true", help="the newest completed checkpoint")
    which.add_argument("--best", action="store_true", help="the best by the searcher metric")
    which.add_argument("--uuid", default=None, help="a checkpoint of this trial by UUID")
    dl.add_argument("-o", "--output-dir", default=None, help="default: checkpoints/<uuid>")
    dl.add_argument("-q", "--quiet", action="store_true", help="print only the path")
    dl.add_argument("--sort-by", default=None, help="with --best: the validation metric to use")
    dl.add_argument(
        "--smaller-is-better",
        type=_render.truth,
        default=None,
        help="with --sort-by: whether smaller values of it are better (true or false)",
    )
    dl.set_defaults(func=cmd_download)
