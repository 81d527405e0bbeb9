"""``det experiment create --test``: try a config and model definition on one batch.

As in Determined: the config is validated (``validateOnly``), then a test experiment runs one
trial for one batch with a validation and a checkpoint after it, no restarts, and checkpoint GC
that keeps nothing. ``det`` follows it and exits 0 when it completes, else prints the trial's logs
and exits 1. Either way the test experiment is then deleted, so nothing is left in ``det e list``
or the web UI (``--test`` creates no experiment). Hyperparameters take one fixed value each (the
reference samples them at random): a failure can then be reproduced.
"""

from __future__ import annotations

import copy
import sys
import time
from typing import Any

import yaml

from determined.cli import _logs, _render
from determined.common.api import Session, _routes

_TERMINAL = ("STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED")


def _one_value(hp: Any) -> Any:
    if not isinstance(hp, dict):
        return hp  # a bare value is a const
    kind = hp.get("type")
    if kind is None:
        return {k: _one_value(v) for k, v in hp.items()}  # nested
    if kind == "const":
        return hp.get("val")
    if kind in ("int", "double"):
        return hp.get("minval")
    if kind == "log":
        return float(hp.get("base", 10)) ** float(hp.get("minval", 0))
    if kind == "categorical":
        return (hp.get("vals") or [None])[0]
    return hp


def test_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config of the test experiment (Determined's test-mode rules, fixed hparams)."""
    test = copy.deepcopy(config)
    searcher = config.get("searcher") or {}
    test.update(
        {
            "description": f"[test-mode] {config.get('description') or config.get('name') or ''}",
            "scheduling_unit": 1,
            "min_validation_period": {"batches": 1},
            "checkpoint_storage": {
                **(config.get("checkpoint_storage") or {}),
                "save_experiment_best": 0,
                "save_trial_best": 0,
                "save_trial_latest": 0,
            },
            "searcher": {
                "name": "single",
                "metric": searcher.get("metric"),
                "max_length": {"batches": 1},
            },
            "hyperparameters": {
                k: _one_value(v) for k, v in (config.get("hyperparameters") or {}).items()
            },
            "max_restarts": 0,
        }
    )
    return test


def run(sess: Session, body: dict[str, Any], timeout: float = 3600) -> int:
    """Validate, create the test experiment, follow it; the experiment id."""
    print("Validating experiment configuration...", flush=True)
    _routes.create_experiment(sess, {**body, "validateOnly": True})
    print("Experiment configuration validation succeeded!", flush=True)
    config = yaml.safe_load(body["config"])
    test_body = {**body, "activate": True, "config": yaml.safe_dump(test_config(config))}
    exp_id = int(_routes.create_experiment(sess, test_body)["experiment"]["id"])
    print(f"Created test experiment {exp_id}", flush=True)
    deadline = time.monotonic() + timeout
    while True:
        state = _routes.get_experiment(sess, exp_id)["state"]
        if state in _TERMINAL:
            break
        if time.monotonic() > deadline:
            raise _render.CliError(f"test experiment {exp_id} did not end within {timeout:g}s")
        time.sleep(0.5)
    try:
        if state == "STATE_COMPLETED":
            print("Model definition test succeeded!", flush=True)
            return exp_id
        trials = _routes.list_experiment_trials(sess, exp_id)["trials"]
        if trials:
            _logs.print_logs(_logs.trial_logs(sess, int(trials[0]["id"])))
        print(f"Model definition test (experiment {exp_id}) ended in {state}", file=sys.stderr)
        raise _render.CliError(f"the test experiment {exp_id} failed; its logs are above")
    finally:
        _forget(sess, exp_id)


def _forget(sess: Session, exp_id: int) -> None:
    """Delete the ended test experiment; a failure to do so is reported, not fatal."""
    try:
        _routes.delete_experiment(sess, exp_id)
    except Exception as e:  # the test's own outcome matters more than its clean-up
        print(f"Could not delete test experiment {exp_id}: {e}", file=sys.stderr)
