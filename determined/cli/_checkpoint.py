"""``det checkpoint`` (alias ``c``): describe, download and delete checkpoints; ``det e lc``."""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

from determined import errors
from determined.cli import _render, _session
from determined.common.api import Session, _routes
from determined.experimental.checkpoint import Checkpoint, DownloadMode
from determined.experimental.client import CheckpointStateError, DownloadFailed


def _get(args: argparse.Namespace, uuid: str) -> dict[str, Any]:
    sess = _session.session(args)
    return dict(_routes.get_checkpoint(sess, uuid))


def render_checkpoint(ckpt: dict[str, Any], path: pathlib.Path | None = None) -> None:
    """The reference's one-row table, under ``Local checkpoint path:`` after a download."""
    if path is not None:
        print("Local checkpoint path:")
        print(path, "\n")
    training = ckpt.get("training") or {}
    metadata = ckpt.get("metadata") or {}
    headers = [
        "Experiment ID",
        "Trial ID",
        "Steps Completed",
        "Report Time",
        "Checkpoint UUID",
        "Validation Metrics",
        "Metadata",
    ]
    row = [
        training.get("experimentId"),
        training.get("trialId"),
        metadata.get("steps_completed"),
        _render.format_time(ckpt.get("reportTime")),
        ckpt.get("uuid"),
        json.dumps(training.get("validationMetrics"), indent=4),
        json.dumps(metadata, indent=4),
    ]
    _render.table(headers, [row])


def cmd_describe(args: argparse.Namespace) -> None:
    ckpt = _get(args, args.uuid)
    if args.json:
        _render.print_json(ckpt)
        return
    render_checkpoint(ckpt)


def download(
    sess: Session,
    ckpt: dict[str, Any],
    output_dir: pathlib.Path,
    mode: DownloadMode = DownloadMode.AUTO,
) -> pathlib.Path:
    """Download a checkpoint with the SDK's ``Checkpoint.download``: from its storage, or
    through the master when this machine cannot read the storage (``mode``)."""
    checkpoint = Checkpoint._from_json(ckpt, sess)
    try:
        return pathlib.Path(checkpoint.download(str(output_dir), mode=mode))
    except (CheckpointStateError, DownloadFailed, NotImplementedError) as e:
        raise _render.CliError(str(e)) from e
    except (TypeError, ValueError, ImportError, errors.StorageConfigError) as e:
        raise _render.CliError(f"checkpoint {checkpoint.uuid}: cannot open its storage: {e}") from e


def cmd_download(args: argparse.Namespace) -> None:
    ckpt = _get(args, args.uuid)
    out = pathlib.Path(args.output_dir or pathlib.Path("checkpoints") / args.uuid)
    path = download(_session.session(args), ckpt, out, args.mode)
    if args.quiet:
        print(path)
    else:
        render_checkpoint(ckpt, path)


def cmd_download_experiment(args: argparse.Namespace) -> None:
    """``det e download ID``: the ``--top-n`` best COMPLETED checkpoints, each into
    ``<output-dir>/<uuid>``; by the searcher metric unless ``--sort-by`` names another."""
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise _render.CliError("--sort-by and --smaller-is-better must be given together")
    params: dict[str, Any] = {"limit": args.top_n, "states": "STATE_COMPLETED"}
    if args.sort_by is None:
        params["sortByAttr"] = "SORT_BY_SEARCHER_METRIC"
    else:
        params["sortByMetric"] = args.sort_by
        params["orderBy"] = "ORDER_BY_ASC" if args.smaller_is_better else "ORDER_BY_DESC"
    sess = _session.session(args)
    body = _routes.list_experiment_checkpoints(sess, args.experiment_id, params)
    top = pathlib.Path(args.output_dir)
    top.mkdir(parents=True, exist_ok=True)
    for ckpt in body.get("checkpoints") or []:
        path = download(sess, ckpt, top / str(ckpt["uuid"]))
        if args.quiet:
            print(path)
        else:
            render_checkpoint(ckpt, path)
            print()


def add_experiment_download(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("download", help="download checkpoints for an experiment")
    p.add_argument("experiment_id", type=int, help="experiment ID to download")
    p.add_argument("-o", "--output-dir", default="checkpoints", help="into <dir>/<uuid>")
    p.add_argument("--top-n", type=int, default=1, help="how many of the best checkpoints")
    p.add_argument("--sort-by", default=None, help="validation metric to sort on")
    p.add_argument(
        "--smaller-is-better", type=_render.truth, default=None, help="sort order for --sort-by"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the paths")
    p.set_defaults(func=cmd_download_experiment)


def cmd_delete(args: argparse.Namespace) -> None:
    uuids = [u.strip() for u in args.checkpoints_uuids.split(",") if u.strip()]
    if not args.yes and not _render.yes_or_no(
        "Deleting checkpoints deletes their files from checkpoint storage. Proceed?"
    ):
        print("Stopping deletion of checkpoints.")
        return
    _routes.delete_checkpoints(_session.session(args), uuids)
    print(f"Deletion of checkpoints {args.checkpoints_uuids} is in progress")


def cmd_remove_files(args: argparse.Namespace) -> None:
    """``det c rm UUIDS --glob G...``: remove the named files from each checkpoint."""
    uuids = [u.strip() for u in args.checkpoints_uuids.split(",") if u.strip()]
    if (
        args.glob
        and not args.yes
        and not _render.yes_or_no(
            "All files matching the globs will be deleted from every checkpoint given, in "
            "checkpoint storage. Proceed?"
        )
    ):
        print("Stopping removal of files from checkpoints.")
        return
    _routes.remove_checkpoint_files(_session.session(args), uuids, args.glob)
    print(f"Removal of files from checkpoints {args.checkpoints_uuids} is done")


def _validation_metric(ckpt: dict[str, Any], metric: str) -> str:
    validation = (ckpt.get("training") or {}).get("validationMetrics") or {}
    avg = validation.get("avgMetrics") or {}
    return str(avg[metric]) if metric in avg else ""


def best_checkpoints(
    ckpts: list[dict[str, Any]], metric: str, smaller: bool, n: int
) -> list[dict[str, Any]]:
    """The ``n`` best checkpoints with a searcher metric (again here: a master may not sort)."""
    valid = []
    for c in ckpts:
        avg = ((c.get("training") or {}).get("validationMetrics") or {}).get("avgMetrics") or {}
        value = avg.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            valid.append((float(value), c))
    valid.sort(key=lambda pair: pair[0] if smaller else -pair[0])
    return [c for _, c in valid[:n]]


def cmd_list_checkpoints(args: argparse.Namespace) -> None:
    """``det e lc ID [--best N]``."""
    sess = _session.session(args)
    params: dict[str, Any] = {
        "sortByAttr": "SORT_BY_SEARCHER_METRIC" if args.best else "SORT_BY_END_TIME"
    }
    if args.best:
        params["limit"] = args.best
    body = _routes.list_experiment_checkpoints(sess, args.experiment_id, params)
    ckpts = body.get("checkpoints") or []
    if args.json:
        _render.print_json(ckpts)
        return
    metric, smaller = "", True
    if ckpts:
        config = (ckpts[0].get("training") or {}).get("experimentConfig") or {}
        searcher = config.get("searcher") or {}
        metric = str(searcher.get("metric") or "")
        smaller = bool(searcher.get("smaller_is_better", True))
    if args.best:
        ckpts = best_checkpoints(ckpts, metric, smaller, args.best)
    headers = ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources"]
    headers.append("Size")
    rows = [
        [
            (c.get("training") or {}).get("trialId"),
            (c.get("metadata") or {}).get("steps_completed"),
            _render.strip_state(c.get("state")),
            _validation_metric(c, metric),
            c.get("uuid"),
            _render.format_resources(c.get("resources")),
            _render.format_resource_sizes(c.get("resources")),
        ]
        for c in ckpts
    ]
    _render.table(headers, rows, as_csv=args.csv)


def add_mode_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode",
        choices=list(DownloadMode),
        default=DownloadMode.AUTO,
        type=DownloadMode,
        help="direct: from checkpoint storage; master: through the master; auto: direct, "
        "else through the master",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("checkpoint", aliases=["c"], help="manage checkpoints")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    dl = cmds.add_parser("download", help="download checkpoint from storage")
    dl.add_argument("uuid", help="checkpoint UUID")
    dl.add_argument("-o", "--output-dir", default=None, help="default: checkpoints/<uuid>")
    dl.add_argument("-q", "--quiet", action="store_true", help="print only the path")
    add_mode_arg(dl)
    dl.set_defaults(func=cmd_download)
    de = cmds.add_parser("describe", help="describe checkpoint")
    de.add_argument("uuid", help="checkpoint UUID")
    de.add_argument("--json", action="store_true", help="print as JSON")
    de.set_defaults(func=cmd_describe)
    rm = cmds.add_parser("delete", help="delete checkpoints")
    rm.add_argument("checkpoints_uuids", help="comma-separated checkpoint UUIDs")
    rm.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rm.set_defaults(func=cmd_delete)
    rf = cmds.add_parser("rm", help="remove files from checkpoints")
    rf.add_argument("checkpoints_uuids", help="comma-separated checkpoint UUIDs")
    rf.add_argument(
        "--glob",
        action="append",
        default=[],
        help="files to remove (relative to the checkpoint; ** spans directories); without "
        "any, the records are refreshed from storage",
    )
    rf.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rf.set_defaults(func=cmd_remove_files)
