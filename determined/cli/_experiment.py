"""``det experiment`` (alias ``e``): list, inspect and steer experiments.

Each command is one or two v1 calls on the master, then a table or a one-line confirmation in the
reference's words (``Paused experiment 3``).
"""

from __future__ import annotations

import argparse
import base64
import pathlib
import sys
import time
from typing import Any

from determined.cli import (
    _checkpoint,
    _cluster_message,
    _continue,
    _create,
    _describe,
    _logs,
    _project,
    _render,
    _session,
    _settings,
)
from determined.common.api import Session, _routes


def _get(sess: Session, experiment_id: int) -> dict[str, Any]:
    return dict(_routes.get_experiment(sess, experiment_id))


def cmd_list(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    banner = _cluster_message.show_active(sess)
    if banner is not None and not (args.json or args.csv):
        print(banner, file=sys.stderr)  # stderr: the table on stdout stays parseable
    users = None if args.all else [str(_session.current_user(sess).get("username"))]

    def page(offset: int, limit: int) -> dict[str, Any]:
        archived = None if args.all else False
        return _routes.list_experiments(
            sess, archived=archived, users=users, offset=offset, limit=limit
        )

    exps = _describe.read_paginated(page, "experiments", args)
    headers = list(_describe.EXPERIMENT_LIST_HEADERS) + (["Archived"] if args.all else [])
    if args.show_project:
        headers = ["Workspace", "Project", *headers]
    rows = []
    for e in exps:
        row = _describe.experiment_list_row(e)
        if args.show_project:
            row = [e.get("workspaceName"), e.get("projectName"), *row]
        rows.append(row + ([e.get("archived")] if args.all else []))
    if args.json:
        _render.print_json(exps)
        return
    _render.table(headers, rows, as_csv=args.csv)


def cmd_move(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    _, p = _project.project_by_name(sess, args.workspace_name, args.project_name)
    body = {"destinationProjectId": p["id"], "experimentId": args.experiment_id}
    _routes.move_experiment(sess, args.experiment_id, body)
    print(f'Moved experiment {args.experiment_id} to project "{args.project_name}"')


def cmd_config(args: argparse.Namespace) -> None:
    _render.print_yaml(_get(_session.session(args), args.experiment_id).get("config"))


def cmd_describe(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    try:
        ids = [int(x) for x in args.experiment_ids.split(",") if x.strip()]
    except ValueError as e:
        raise _render.CliError(
            f"experiment IDs must be comma-separated integers, not {args.experiment_ids!r}"
        ) from e
    responses = [_routes.get_experiment_response(sess, i) for i in ids]
    if args.json:
        _render.print_json(responses)
        return
    _describe.print_experiments(
        sess,
        [r["experiment"] for r in responses],
        as_csv=args.csv,
        metrics=args.metrics,
        outdir=args.outdir,
    )


def cmd_list_trials(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    trials = _describe.read_paginated(
        _describe.experiment_trials(sess, args.experiment_id), "trials", args
    )
    if args.json:
        _render.print_json(trials)
        return
    headers = ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    rows = [
        [
            t.get("id"),
            _render.strip_state(t.get("state")),
            _render.pretty_json(t.get("hparams")),
            _render.format_time(t.get("startTime")),
            _render.format_time(t.get("endTime")),
            t.get("totalBatchesProcessed"),
        ]
        for t in trials
    ]
    _render.table(headers, rows, as_csv=args.csv)


def cmd_logs(args: argparse.Namespace) -> None:
    if args.follow and (args.head is not None or args.tail is not None):
        raise _render.CliError("use at most one of --follow, --head and --tail")
    sess = _session.session(args)
    _get(sess, args.experiment_id)
    trial_id = _logs.lowest_trial_id(sess, args.experiment_id)
    if trial_id is None:
        raise _render.CliError(f"experiment {args.experiment_id} has no trials yet")
    try:
        entries = _logs.trial_logs(
            sess,
            trial_id,
            follow=args.follow,
            head=args.head,
            tail=args.tail,
            filters=_logs.filters_of(args),
        )
        _logs.print_logs(entries, as_json=args.json)
    finally:
        print(
            f"Trial log stream ended. To reopen log stream, run: det trial logs -f {trial_id}",
            file=sys.stderr,
        )


def cmd_download_model_def(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    b64_tgz = _routes.get_model_def(sess, args.experiment_id)
    dst = args.output_dir / f"experiment_{args.experiment_id}_model_def.tgz"
    dst.write_bytes(base64.b64decode(b64_tgz))
    print(f"Wrote {dst}")


def _verb(action: _routes.ExperimentAction, message: str) -> Any:
    def run(args: argparse.Namespace) -> None:
        sess = _session.session(args)
        _routes.experiment_action(sess, args.experiment_id, action)
        print(f"{message} experiment {args.experiment_id}")

    return run


def cmd_delete_tb_files(args: argparse.Namespace) -> None:
    """``det e delete-tb-files ID``: the TensorBoard files its trials synced to storage."""
    _routes.delete_tensorboard_files(_session.session(args), args.experiment_id)
    print(f"Deleted the TensorBoard files of experiment {args.experiment_id}")


def cmd_delete(args: argparse.Namespace) -> None:
    if not args.yes and not _render.yes_or_no(
        "Deleting an experiment deletes its logs, checkpoints and metadata for good; "
        "`det e archive` hides it instead. Proceed?"
    ):
        print("Aborting experiment deletion.")
        return
    _routes.delete_experiment(_session.session(args), args.experiment_id)
    print(f"Deletion of experiment {args.experiment_id} is in progress")


def cmd_wait(args: argparse.Namespace) -> None:
    """Poll until terminal; exit 1 unless the experiment COMPLETED (as the reference)."""
    sess = _session.session(args)
    while True:
        state = str(_get(sess, args.experiment_id).get("state"))
        if state in _logs.TERMINAL_STATES:
            break
        time.sleep(args.polling_interval)
    print(f"Experiment {args.experiment_id} ended: {_render.strip_state(state)}")
    if state != "STATE_COMPLETED":
        raise SystemExit(1)


def _patch(sess: Session, experiment_id: int, **fields: Any) -> None:
    _routes.patch_experiment(sess, experiment_id, {"id": experiment_id, **fields})


def cmd_label_add(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    labels = list(_get(sess, args.experiment_id).get("labels") or [])
    if args.label not in labels:
        _patch(sess, args.experiment_id, labels=labels + [args.label])
    print(f"Added label '{args.label}' to experiment {args.experiment_id}")


def cmd_label_remove(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    labels = list(_get(sess, args.experiment_id).get("labels") or [])
    if args.label in labels:
        _patch(sess, args.experiment_id, labels=[x for x in labels if x != args.label])
    print(f"Removed label '{args.label}' from experiment {args.experiment_id}")


def cmd_set_description(args: argparse.Namespace) -> None:
    _patch(_session.session(args), args.experiment_id, description=args.description)
    print(f"Set description of experiment {args.experiment_id} to '{args.description}'")


def cmd_set_name(args: argparse.Namespace) -> None:
    _patch(_session.session(args), args.experiment_id, name=args.name)
    print(f"Set name of experiment {args.experiment_id} to '{args.name}'")


def _with_id(cmds: argparse._SubParsersAction, name: str, help: str, **kw: Any) -> Any:  # noqa: A002
    p = cmds.add_parser(name, help=help, **kw)
    p.add_argument("experiment_id", type=int, help="experiment ID")
    return p


def _add_inspection(cmds: argparse._SubParsersAction) -> None:
    ls = cmds.add_parser("list", aliases=["ls"], help="list experiments")
    ls.add_argument("-a", "--all", action="store_true", help="include archived and others'")
    ls.add_argument("--csv", action="store_true", help="print as CSV")
    ls.add_argument("--json", action="store_true", help="print as JSON")
    ls.add_argument(
        "--show_project",
        action="store_true",
        help="include columns for workspace name and project name",
    )
    _describe.add_pagination_args(ls)
    ls.set_defaults(func=cmd_list)
    _with_id(cmds, "config", "display experiment config").set_defaults(func=cmd_config)
    d = cmds.add_parser("describe", help="describe experiment")
    d.add_argument("experiment_ids", help="comma-separated list of experiment IDs")
    fmt = d.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print as JSON")
    fmt.add_argument("--csv", action="store_true", help="print as CSV")
    d.add_argument("--metrics", action="store_true", help="display full metrics")
    d.add_argument(
        "--outdir", type=pathlib.Path, default=None, help="write CSV files here instead of printing"
    )
    d.set_defaults(func=cmd_describe)
    lg = _with_id(cmds, "logs", "fetch logs of the first trial of an experiment")
    _logs.add_log_args(lg)
    lg.set_defaults(func=cmd_logs)
    dm = _with_id(cmds, "download-model-def", "download model definition")
    dm.add_argument("--output-dir", type=pathlib.Path, default=pathlib.Path("."))
    dm.set_defaults(func=cmd_download_model_def)
    lt = _with_id(cmds, "list-trials", "list trials of experiment", aliases=["lt"])
    lt.add_argument("--csv", action="store_true", help="print as CSV")
    lt.add_argument("--json", action="store_true", help="print as JSON")
    _describe.add_pagination_args(lt)
    lt.set_defaults(func=cmd_list_trials)
    lc = _with_id(cmds, "list-checkpoints", "list checkpoints of experiment", aliases=["lc"])
    lc.add_argument("--best", type=int, metavar="N", help="the best N checkpoints")
    lc.add_argument("--csv", action="store_true", help="print as CSV")
    lc.add_argument("--json", action="store_true", help="print as JSON")
    lc.set_defaults(func=_checkpoint.cmd_list_checkpoints)
    _checkpoint.add_experiment_download(cmds)


def _add_lifecycle(cmds: argparse._SubParsersAction) -> None:
    verbs: list[tuple[str, list[str], _routes.ExperimentAction, str]] = [
        ("activate", ["unpause"], "activate", "Activated"),
        ("pause", [], "pause", "Paused"),
        ("cancel", [], "cancel", "Canceled"),
        ("kill", [], "kill", "Killed"),
        ("archive", [], "archive", "Archived"),
        ("unarchive", [], "unarchive", "Unarchived"),
    ]
    for name, aliases, path, message in verbs:
        p = _with_id(cmds, name, f"{name} experiment", aliases=aliases)
        p.set_defaults(func=_verb(path, message))
    mv = _with_id(cmds, "move", "move experiment to another project")
    mv.add_argument("workspace_name", help="Name of destination workspace")
    mv.add_argument("project_name", help="Name of destination project")
    mv.set_defaults(func=cmd_move)
    de = _with_id(cmds, "delete", "delete experiment")
    de.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    de.set_defaults(func=cmd_delete)
    tb = _with_id(cmds, "delete-tb-files", "delete TensorBoard files of the experiment")
    tb.set_defaults(func=cmd_delete_tb_files)
    w = _with_id(cmds, "wait", "wait for experiment to reach a terminal state")
    w.add_argument("--polling-interval", type=float, default=5, help="seconds between polls")
    w.set_defaults(func=cmd_wait)
    label = cmds.add_parser("label", help="manage experiment labels")
    lcmds = label.add_subparsers(dest="label_command", metavar="COMMAND", required=True)
    for name, func in (("add", cmd_label_add), ("remove", cmd_label_remove)):
        p = _with_id(lcmds, name, f"{name} label")
        p.add_argument("label", help="label")
        p.set_defaults(func=func)
    set_ = cmds.add_parser("set", help="set experiment attributes")
    scmds = set_.add_subparsers(dest="set_command", metavar="COMMAND", required=True)
    desc = _with_id(scmds, "description", "set experiment description")
    desc.add_argument("description", help="experiment description")
    desc.set_defaults(func=cmd_set_description)
    nm = _with_id(scmds, "name", "set experiment name")
    nm.add_argument("name", help="experiment name")
    nm.set_defaults(func=cmd_set_name)
    _settings.add_parser(scmds)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiment", aliases=["e"], help="manage experiments")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND")
    p.set_defaults(
        func=cmd_list, all=False, csv=False, json=False, show_project=False
    )  # `det e` lists, as 0.37
    _create.add_parser(cmds)
    _add_inspection(cmds)
    _add_lifecycle(cmds)
    _continue.add_parser(cmds)
