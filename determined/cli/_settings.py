"""``det e set gc-policy|max-slots|weight|priority``: change an experiment's checkpoint GC
policy or its scheduling fields (``PATCH /api/v1/experiments/{id}``), with the reference's
confirmations; ``gc-policy`` first shows what the new policy would delete and asks."""

from __future__ import annotations

import argparse
import pprint
from typing import Any

from determined.cli import _render, _session


def _patch(args: argparse.Namespace, **fields: Any) -> None:
    sess = _session.session(args)
    body = {"id": args.experiment_id, **fields}
    sess.patch(f"/api/v1/experiments/{args.experiment_id}", json=body)


def _preview(args: argparse.Namespace, policy: dict[str, int]) -> None:
    sess = _session.session(args)
    resp = sess.get(f"/api/v1/experiments/{args.experiment_id}/preview_gc", params=policy).json()
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
    for name, field, wire, kind in (
        ("max-slots", "max_slots", "maxSlots", _none_or_int),
        ("weight", "weight", "weight", float),
        ("priority", "priority", "priority", int),
    ):
        p = scmds.add_parser(name, help=f"set `{field}` of experiment")
        p.add_argument("experiment_id", type=int, help="experiment ID to modify")
        p.add_argument(field, type=kind, help=field.replace("_", " "))
        p.set_defaults(func=_resource(field, wire))
