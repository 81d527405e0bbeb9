"""``det e set gc-policy|max-slots|weight|priority|log-retention``: change an experiment's
checkpoint GC policy or its scheduling fields (``PATCH /api/v1/experiments/{id}``), with the
reference's confirmations (``gc-policy`` first shows what the new policy would delete and
asks), or how long its trials' logs are kept (also ``det t set log-retention``)."""

from __future__ import annotations

import argparse
import pprint
from typing import Any, Literal

from determined.cli import _render, _session
from determined.common.api import _routes


def _patch(args: argparse.Namespace, **fields: Any) -> None:
    sess = _session.session(args)
    _routes.patch_experiment(sess, args.experiment_id, {"id": args.experiment_id, **fields})


def _preview(args: argparse.Namespace, policy: dict[str, int]) -> None:
    sess = _session.session(args)
    resp = _routes.preview_gc(sess, args.experiment_id, policy)
    metric = resp.get("metric_name")
    doomed = resp.get("checkpoints") or []
    validated = [c for c in doomed if (c.get("step") or {}).get("validation")]
    if validated:
        print(
            "The following checkpoints with validation will be deleted by applying this GC Policy:"
        )
        headers = ["Trial ID", "# of Batches", "State", f"Validation Metric ({metric})", "UUID"]
        rows = [
            [
                c["TrialID"],
                c["StepsCompleted"],
                c["State"],
                (c.get("ValidationMetrics") or {}).get(metric),
                c["UUID"],
            ]
            for c in sorted(validated, key=lambda c: (c["TrialID"], c["ReportTime"]))
        ]
        _render.table(headers, rows)
    print(
        f"This policy will delete {len(validated)} checkpoints with validations and "
        f"{len(doomed) - len(validated)} checkpoints without validations."
    )


def cmd_gc_policy(args: argparse.Namespace) -> None:
    policy = {
        "save_experiment_best": args.save_experiment_best,
        "save_trial_best": args.save_trial_best,
        "save_trial_latest": args.save_trial_latest,
    }
    if not args.yes:
        _preview(args, policy)
        if not _render.yes_or_no(
            "Changing the checkpoint garbage collection policy of an experiment may result\n"
            "in the unrecoverable deletion of checkpoints.  Do you wish to proceed?"
        ):
            print("Aborting operations.")
            return
    storage = {
        "saveExperimentBest": args.save_experiment_best,
        "saveTrialBest": args.save_trial_best,
        "saveTrialLatest": args.save_trial_latest,
    }
    _patch(args, checkpointStorage=storage)
    print(f"Set GC policy of experiment {args.experiment_id} to\n{pprint.pformat(policy)}")


def _resource(field: str, wire: str) -> Any:
    def run(args: argparse.Namespace) -> None:
        value = getattr(args, field)
        _patch(args, resources={wire: value})
        print(f"Set `{field}` of experiment {args.experiment_id} to {value}")

    return run


def _none_or_int(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def add_parser(scmds: argparse._SubParsersAction) -> None:
    """The commands under ``det e set``."""
    gc = scmds.add_parser("gc-policy", help="set experiment GC policy and run GC")
    gc.add_argument("experiment_id", type=int, help="experiment ID to modify")
    for flag, what in (
        ("--save-experiment-best", "number of best checkpoints per experiment to save"),
        ("--save-trial-best", "number of best checkpoints per trial to save"),
        ("--save-trial-latest", "number of latest checkpoints per trial to save"),
    ):
        gc.add_argument(flag, type=int, required=True, help=what)
    gc.add_argument("--yes", action="store_true", help="do not preview and ask first")
    gc.set_defaults(func=cmd_gc_policy)
    add_log_retention(scmds, "experiment")
    for name, field, wire, kind in (
        ("max-slots", "max_slots", "maxSlots", _none_or_int),
        ("weight", "weight", "weight", float),
        ("priority", "priority", "priority", int),
    ):
        p = scmds.add_parser(name, help=f"set `{field}` of experiment")
        p.add_argument("experiment_id", type=int, help="experiment ID to modify")
        p.add_argument(field, type=kind, help=field.replace("_", " "))
        p.set_defaults(func=_resource(field, wire))


def _retention_days(args: argparse.Namespace) -> int:
    """0.37's checks: --days N (-1 to 32767) or --forever."""
    if args.forever:
        return -1
    if args.days is None:
        raise _render.CliError(
            "give --days N (days to keep the logs after the task ends) or --forever"
        )
    if not -1 <= args.days <= 32767:
        raise _render.CliError("--days must be from -1 to 32767")
    return int(args.days)


def cmd_retain_logs(args: argparse.Namespace) -> None:
    """``det e|t set log-retention ID (--days N | --forever)``."""
    days = _retention_days(args)
    noun: Literal["trials", "experiments"] = (
        "trials" if args.retain_noun == "trial" else "experiments"
    )
    _routes.set_log_retention(_session.session(args), noun, args.retain_id, days)
    kept = "forever" if days == -1 else f"for {days} days"
    print(f"Set log retention of {args.retain_noun} {args.retain_id}: logs kept {kept}")


def add_log_retention(scmds: argparse._SubParsersAction, noun: str) -> None:
    p = scmds.add_parser("log-retention", help=f"set `log-retention-days` for a {noun}")
    p.add_argument("retain_id", type=int, metavar=f"{noun}_id", help=f"{noun} ID")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--days", type=int, default=None, help="days to keep the logs (-1 to 32767)")
    which.add_argument("--forever", action="store_true", help="keep the logs forever")
    p.set_defaults(func=cmd_retain_logs, retain_noun=noun)
