"""The same search run on the cluster: ``det e create remote.yaml .`` starts a single-trial
experiment whose trial runs this script; it creates the searched experiment and checkpoints
its state after every event, so a preempted or restarted runner trial continues the search."""

from __future__ import annotations

import logging
import pathlib

import yaml
from search_method import BayesianSearch

from determined import core, searcher

HERE = pathlib.Path(__file__).resolve().parent

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    with core.init() as context:
        method = BayesianSearch()
        runner = searcher.RemoteSearchRunner(method, context=context)
        config = yaml.safe_load((HERE / "custom.yaml").read_text())
        runner.run(config, model_dir=str(HERE))
