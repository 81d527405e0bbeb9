"""``det trial`` (alias ``t``): describe, logs, kill."""

from __future__ import annotations

import argparse
import json
import sys

from determined.cli import _describe, _logs, _render, _session


def cmd_describe(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    body = sess.get(f"/api/v1/trials/{args.trial_id}").json()
    trial = body["trial"]
    items = _describe.workloads(sess, args.trial_id)
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
        headers, rows = _describe.trial_workload_table(items)
        _render.table(headers, rows, as_csv=args.csv)
    if args.metrics_summary:
        _render.print_json(trial.get("summaryMetrics"))


def cmd_logs(args: argparse.Namespace) -> None:
    if args.follow and (args.head is not None or args.tail is not None):
        raise _render.CliError("use at most one of --follow, --head and --tail")
    sess = _session.session(args)
    try:
        entries = _logs.trial_logs(
            sess, args.trial_id, follow=args.follow, head=args.head, tail=args.tail
        )
        _logs.print_logs(entries, as_json=args.json)
    finally:
        print(
            f"Trial log stream ended. To reopen log stream, run: det trial logs -f {args.trial_id}",
            file=sys.stderr,
        )


def cmd_kill(args: argparse.Namespace) -> None:
    _session.session(args).post(f"/api/v1/trials/{args.trial_id}/kill")
    print(f"Killed trial {args.trial_id}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", aliases=["t"], help="manage trials")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    d = cmds.add_parser("describe", help="describe trial")
    d.add_argument("trial_id", type=int, help="trial ID")
    d.add_argument("--metrics-summary", action="store_true", help="print the summary metrics")
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
