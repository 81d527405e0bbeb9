"""``det resources`` (``res``): 0.37's historical resource-usage reports, printed as the master
writes them (CSV, or JSON with ``--json``): ``allocations``, ``raw``, ``aggregated``."""

from __future__ import annotations

import argparse
import sys

from determined.cli import _session
from determined.common.api import _routes

DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"


def _print(args: argparse.Namespace, path: str, params: dict[str, str]) -> None:
    """The CSV report at ``path`` (the master's non-API routes; JSON: ``_routes``)."""
    _write(_session.session(args).get(path, params=params).content)


def _write(body: bytes) -> None:
    sys.stdout.buffer.write(body)
    sys.stdout.buffer.flush()


def _window(args: argparse.Namespace) -> dict[str, str]:
    return {"timestamp_after": args.timestamp_after, "timestamp_before": args.timestamp_before}


def cmd_allocations(args: argparse.Namespace) -> None:
    _print(args, "/resources/allocation/allocations-csv", _window(args))


def cmd_raw(args: argparse.Namespace) -> None:
    if args.json:
        _write(_routes.get_allocation_report(_session.session(args), "raw", _window(args)))
    else:
        _print(args, "/resources/allocation/raw", _window(args))


def cmd_aggregated(args: argparse.Namespace) -> None:
    params = {
        "start_date": args.start_date,
        "end_date": args.end_date,
        "period": MONTHLY if args.monthly else DAILY,
    }
    if args.json:
        _write(_routes.get_allocation_report(_session.session(args), "aggregated", params))
    else:
        _print(args, "/resources/allocation/aggregated", params)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "resources",
        aliases=["res"],
        help="query historical resource allocation",
        epilog="examples:\n"
        "  det res alloc 2024-01-01T00:00:00Z 2024-02-01T00:00:00Z\n"
        "  det res agg --monthly 2024-01 2024-03",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    alloc = cmds.add_parser(
        "allocations",
        aliases=["alloc"],
        help="get a detailed csv of resource allocation at an allocation level",
    )
    alloc.add_argument("timestamp_after", help="start of the window (YYYY-MM-DDTHH:MM:SSZ)")
    alloc.add_argument("timestamp_before", help="end of the window (YYYY-MM-DDTHH:MM:SSZ)")
    alloc.set_defaults(func=cmd_allocations)
    raw = cmds.add_parser("raw", help="get raw allocation information")
    raw.add_argument("timestamp_after", help="start of the window (YYYY-MM-DDTHH:MM:SSZ)")
    raw.add_argument("timestamp_before", help="end of the window (YYYY-MM-DDTHH:MM:SSZ)")
    raw.add_argument("--json", action="store_true", help="output JSON rather than CSV")
    raw.set_defaults(func=cmd_raw)
    agg = cmds.add_parser(
        "aggregated", aliases=["agg"], help="get aggregated allocation information"
    )
    agg.add_argument("start_date", help="first date to include (YYYY-MM-DD, or YYYY-MM)")
    agg.add_argument("end_date", help="last date to include (YYYY-MM-DD, or YYYY-MM)")
    agg.add_argument("--json", action="store_true", help="output JSON rather than CSV")
    agg.add_argument("--monthly", action="store_true", help="aggregate by month rather than by day")
    agg.set_defaults(func=cmd_aggregated)
