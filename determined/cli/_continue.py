"""``det e continue EXP_ID [--config-file F] [--config k=v ...] [-f]``: train the trial of an
ended single-trial experiment further (the web UI's "Continue Trial"), from its latest
checkpoint, e.g. ``det e continue 3 --config searcher.max_length.batches=2000``."""

from __future__ import annotations

import argparse
import pathlib

import yaml

from determined.cli import _create, _render, _session
from determined.common.api import _routes


def _overrides(args: argparse.Namespace) -> str:
    config: dict = {}
    if args.config_file is not None:
        try:
            config = yaml.safe_load(args.config_file.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise _render.CliError(f"cannot read config file {str(args.config_file)!r}: {e}") from e
        if not isinstance(config, dict):
            raise _render.CliError(f"config file {str(args.config_file)!r} must be a YAML mapping")
    return str(yaml.safe_dump(_create.apply_overrides(config, args.config), sort_keys=False))


def cmd_continue(args: argparse.Namespace) -> None:
    overrides = _overrides(args)
    sess = _session.session(args)
    _routes.continue_experiment(sess, args.experiment_id, overrides)
    print(f"Continued experiment {args.experiment_id}", flush=True)
    if args.follow_first_trial:
        _create.follow_first_trial(sess, args.experiment_id, _session.session(args))


def add_parser(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser(
        "continue", help="train the trial of an ended single-trial experiment further"
    )
    p.add_argument("experiment_id", type=int, help="experiment ID to continue")
    p.add_argument(
        "--config-file", type=pathlib.Path, default=None, help="config overrides (.yaml)"
    )
    p.add_argument(
        "--config", action="append", default=[], help="override: key.path=value (repeatable)"
    )
    p.add_argument(
        "-f",
        "--follow-first-trial",
        "--follow",
        dest="follow_first_trial",
        action="store_true",
        help="follow the logs of the continued trial",
    )
    p.set_defaults(func=cmd_continue)
