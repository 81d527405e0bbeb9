"""``det job list`` (0.37's columns over ``GET /api/v1/job-queues-v2``); ``det job update``
(priority, weight, and beyond 0.37's CLI ``--ahead-of``/``--behind-of``) and ``update-batch``
over ``POST /api/v1/job-queues``."""

from __future__ import annotations

import argparse
from typing import Any

from determined.cli import _render, _session
from determined.common.api import _routes

_HEADERS = [
    "#",
    "ID",
    "Type",
    "Job Name",
    "Priority",
    "Submitted",
    "Slots (acquired/needed)",
    "State",
    "User",
]


def cmd_list(args: argparse.Namespace) -> None:
    params: dict[str, Any] = {
        "orderBy": "ORDER_BY_DESC" if args.reverse else "ORDER_BY_ASC",
        "offset": args.offset,
        "limit": args.limit,
    }
    if args.resource_pool:
        params["resourcePool"] = args.resource_pool
    body = _routes.list_job_queue_v2(_session.session(args), params)
    jobs = [j.get("full") or j.get("limited") for j in body.get("jobs") or []]
    jobs = [j for j in jobs if j]
    if args.json:
        _render.print_json({"jobs": jobs})
        return
    if args.yaml:
        _render.print_yaml({"jobs": jobs})
        return
    rows = []
    for j in jobs:
        summary = j.get("summary") or {}
        ahead = summary.get("jobsAhead", -1)
        name = j.get("name")
        if j.get("type") == "TYPE_EXPERIMENT":
            name = f"{name} ({j.get('entityId')})"
        rows.append(
            [
                ahead if ahead > -1 else "N/A",
                j.get("jobId"),
                j.get("type"),
                name,
                j.get("priority"),
                _render.format_time(j.get("submissionTime")),
                f"{j.get('allocatedSlots')}/{j.get('requestedSlots')}",
                summary.get("state", "N/A"),
                j.get("username"),
            ]
        )
    _render.table(_HEADERS, rows, as_csv=args.csv)


def _post_update(args: argparse.Namespace, update: dict[str, Any]) -> None:
    _routes.update_job_queue(_session.session(args), [update])


def cmd_update(args: argparse.Namespace) -> None:
    update: dict[str, Any] = {"jobId": args.job_id}
    for key, value in (
        ("priority", args.priority),
        ("weight", args.weight),
        ("resourcePool", args.resource_pool),
        ("aheadOf", args.ahead_of),
        ("behindOf", args.behind_of),
    ):
        if value is not None:
            update[key] = value
    _post_update(args, update)


def cmd_update_batch(args: argparse.Namespace) -> None:
    for op in args.operation:
        job_id, _, rest = op.partition(".")
        key, eq, value = rest.partition("=")
        if (
            not job_id
            or not eq
            or key not in ("priority", "weight", "resource_pool", "resource-pool")
        ):
            raise _render.CliError(
                f"{op!r}: write each update as <jobID>.<priority|weight|resource_pool>=<value>"
            )
        field = {"priority": "priority", "weight": "weight"}.get(key, "resourcePool")
        try:
            typed: Any = value if field == "resourcePool" else int(value)
        except ValueError:
            raise _render.CliError(f"{op!r}: {key} must be an integer") from None
        _post_update(args, {"jobId": job_id, field: typed})


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("job", aliases=["j"], help="the job queue")
    p.set_defaults(
        func=cmd_list, json=False, yaml=False, csv=False, reverse=False, offset=0, limit=100,
        resource_pool=None,
    )  # fmt: skip
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND")
    ls = cmds.add_parser("list", aliases=["ls"], help="list jobs")
    ls.add_argument("-p", "--resource-pool", type=str, default=None)
    ls.add_argument("--limit", type=int, default=100, help="jobs per page")
    ls.add_argument("--offset", type=int, default=0, help="jobs to skip")
    ls.add_argument("--pages", type=int, default=1, help="accepted; one page is read")
    ls.add_argument("--reverse", action="store_true", help="newest first")
    fmt = ls.add_mutually_exclusive_group()
    for name in ("json", "yaml", "table", "csv"):
        fmt.add_argument(f"--{name}", action="store_true", help=f"print as {name.upper()}")
    ls.set_defaults(func=cmd_list)
    up = cmds.add_parser("update", aliases=["u"], help="update a job")
    up.add_argument("job_id", type=str, help="the job ID (det job list)")
    group = up.add_mutually_exclusive_group(required=True)
    group.add_argument("-p", "--priority", type=int, default=None, help="1 (first) to 99")
    group.add_argument("-w", "--weight", type=float, default=None)
    group.add_argument("--resource-pool", type=str, default=None)
    group.add_argument("--ahead-of", type=str, default=None, help="move it before this job")
    group.add_argument("--behind-of", type=str, default=None, help="move it after this job")
    up.set_defaults(func=cmd_update)
    batch = cmds.add_parser("update-batch", help="update jobs: <jobID>.<operation>=<value>")
    batch.add_argument("operation", nargs="+")
    batch.set_defaults(func=cmd_update_batch)
