"""``det preview-search CONFIG``: what a search would train, per bracket, without training.

The simulation runs here, with the search code the master runs (``determined.master.searcher``,
which imports no web stack), so it needs no master and gives the master's plan for the same
config and seed: how many trials each bracket creates and how far each group of them trains.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from determined import errors
from determined.cli import _render


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError as e:
        raise _render.CliError(f"cannot read {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise _render.CliError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(config, dict) or not isinstance(config.get("searcher"), dict):
        raise _render.CliError("Experiment configuration must have 'searcher' section")
    return config


def _seed(args: argparse.Namespace, config: dict[str, Any]) -> int:
    if args.seed is not None:
        return int(args.seed)
    seed = (config.get("reproducibility") or {}).get("experiment_seed")
    return int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else 0


def cmd_preview_search(args: argparse.Namespace) -> None:
    from determined.master import searcher

    config = _load(args.config_file)
    try:
        found = searcher.preview(
            config["searcher"], config.get("hyperparameters"), _seed(args, config)
        )
    except errors.InvalidSearcherConfig as e:
        raise _render.CliError(f"invalid searcher configuration: {e}") from e
    if args.json:
        _render.print_json(found.to_dict())
        return
    print("Using search configuration:")
    _render.print_yaml(config["searcher"])
    print()
    print(found.render())


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "preview-search",
        help="preview a hyperparameter search: trials per bracket and how far each trains",
        epilog="example:\n  det preview-search adaptive.yaml\n  det preview-search cfg.yaml --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config_file", help="experiment config file (.yaml)")
    p.add_argument("--json", action="store_true", help="print the preview as JSON")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="simulation seed (default: reproducibility.experiment_seed, else 0)",
    )
    p.set_defaults(func=cmd_preview_search)
