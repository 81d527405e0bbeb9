"""Run the Bayesian-style search from this machine: ``python local_runner.py`` (with
``DET_MASTER`` naming the master). Its state goes to ``./searcher_state``; run it again after
an interruption and it continues the same experiment."""

from __future__ import annotations

import argparse
import logging
import pathlib

import yaml
from search_method import BayesianSearch

from determined import searcher

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-trials", type=int, default=8)
    parser.add_argument("--length", type=int, default=40, help="batches per trial")
    parser.add_argument("--searcher-dir", type=pathlib.Path, default=pathlib.Path("searcher_state"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    method = BayesianSearch(max_trials=args.max_trials, length=args.length)
    runner = searcher.LocalSearchRunner(method, searcher_dir=args.searcher_dir)
    config = yaml.safe_load((HERE / "custom.yaml").read_text())
    exp_id = runner.run(config, model_dir=str(HERE))
    found = method.best()
    print(f"experiment {exp_id} finished; best (hparams, validation_mse): {found}")


if __name__ == "__main__":
    main()
