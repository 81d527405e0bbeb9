"""``det preview-search CONFIG``: what a search would train, per bracket, without training.

The simulation runs on this machine, with the search code the master runs, as a process
(``python -m determined.master.searcher preview``: the CLI never imports the master), so it
needs no master and gives the master's plan for the same config and seed: how many trials each
bracket creates and how far each group of them trains.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import yaml

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
    config = _load(args.config_file)
    asked = {
        "searcher": config["searcher"],
        "hyperparameters": config.get("hyperparameters"),
        "seed": _seed(args, config),
    }
    cmd = [sys.executable, "-m", "determined.master.searcher", "preview"]
    done = subprocess.run(cmd, input=json.dumps(asked), capture_output=True, text=True)
    if done.returncode == 2:  # the search refused the config (searcher/__main__.py)
        raise _render.CliError(f"invalid searcher configuration: {done.stderr.strip()}")
    if done.returncode != 0:
        raise _render.CliError(f"the preview failed:\n{done.stderr.strip()}")
    found = json.loads(done.stdout)
    if args.json:
        _render.print_json(found["preview"])
        return
    print("Using search configuration:")
    _render.print_yaml(config["searcher"])
    print()
    print(found["text"])


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
