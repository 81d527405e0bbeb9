"""``POST /api/v1/experiments/continue {id, overrideConfig}``: the web UI's "Continue Trial" and
``det e continue``. An ended single-trial experiment trains its trial further, from its latest
checkpoint, to the ``searcher.max_length`` of the config with the overrides merged in."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from determined import errors
from determined.master import experiment, resources
from determined.master._errors import InvalidArgument
from determined.master.api import _redact
from determined.master.api._auth import Caller
from determined.master.api._deps import ExperimentsDep, StoreDep
from determined.master.api._models import ContinueExperiment
from determined.master.api._wire import experiment_json
from determined.master.experiment import Experiments
from determined.master.searcher import max_length_units
from determined.master.store import ExperimentRow, Store, TrialRow, _experiments

router = APIRouter(prefix="/api/v1")


def _override(text: str | None) -> dict[str, Any]:
    override = experiment.load_yaml(text or "", "overrideConfig") or {}
    if not isinstance(override, dict):
        raise InvalidArgument("overrideConfig must be a YAML mapping of config fields")
    return override


def _unit(searcher: dict[str, Any]) -> str:
    if searcher.get("time_metric") is not None:
        return f"max_time ({searcher['time_metric']})"
    length = searcher.get("max_length")
    return next(iter(length)) if isinstance(length, dict) and len(length) == 1 else "max_length"


def continued_config(
    exp: ExperimentRow, trial: TrialRow, override: dict[str, Any]
) -> dict[str, Any]:
    """The experiment's config with ``override`` merged in, validated, and checked for what a
    continue may change: not the hyperparameters, not the searcher, and a length past what the
    trial trained. Raises InvalidArgument (400) naming what to fix."""
    old = dict(exp["config"])
    if exp["archived"]:
        raise InvalidArgument(
            f"experiment {exp['id']} is archived; unarchive it first (det e unarchive "
            f"{exp['id']}) to continue it"
        )
    if (old.get("searcher") or {}).get("name") != "single":
        raise InvalidArgument(
            f"experiment {exp['id']} uses the {old['searcher'].get('name')!r} searcher; only a "
            "single-searcher experiment can be continued (create a new experiment instead)"
        )
    # A redacted config sent back: its placeholders get the stored secrets again.
    merged = experiment.merge_configs(old, override)
    config = experiment.parse_experiment_config(_redact.restore(merged, old))
    resources.check_bind_mounts(config)
    if config.get("hyperparameters") != old.get("hyperparameters"):
        raise InvalidArgument(
            "a continued trial keeps its hyperparameters: remove `hyperparameters` from the "
            "overrides (a new experiment, or a warm start through searcher.source_trial_id, "
            "can train with others)"
        )
    new, was = config["searcher"], old["searcher"]
    if new.get("name") != "single":
        raise InvalidArgument(
            f"searcher.name must stay 'single' for a continued experiment, not {new.get('name')!r}"
        )
    if _unit(new) != _unit(was):
        raise InvalidArgument(
            f"searcher.max_length must stay in {_unit(was)}, as the trial trained in them"
        )
    try:
        length = max_length_units(new, minimum=1)
    except errors.InvalidSearcherConfig as e:
        raise InvalidArgument(str(e)) from e
    trained = trial["op_length"] if trial["op_complete"] else None
    if trained is not None and length <= int(trained):
        key = "max_length" if _unit(was) == "max_length" else f"max_length.{_unit(was)}"
        if was.get("time_metric") is not None:
            key = "max_time"
        raise InvalidArgument(
            f"searcher.max_length must be larger than the {trained} {_unit(was)} trial "
            f"{trial['id']} already trained to (for example --config "
            f"searcher.{key}={2 * int(trained)})"
        )
    return config


def _continue(
    experiment_id: int, body: ContinueExperiment, exps: Experiments, store: Store
) -> dict[str, Any]:
    override = _override(body.override_config)
    exps.continue_trial(experiment_id, lambda exp, trial: continued_config(exp, trial, override))
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        return {"experiment": experiment_json(conn, exp), "warnings": []}  # redacted


@router.post("/experiments/continue")
def continue_experiment(
    body: ContinueExperiment, caller: Caller, exps: ExperimentsDep, store: StoreDep
) -> dict[str, Any]:
    """``{experiment, warnings}`` once the trial is ACTIVE again (400 when refused)."""
    caller.require_user()
    if body.id is None:
        raise InvalidArgument("id: the experiment to continue is required")
    caller.check_owner(store, body.id, "continue")
    return _continue(body.id, body, exps, store)


@router.post("/experiments/{experiment_id}/continue")
def continue_experiment_by_path(
    experiment_id: int,
    body: ContinueExperiment,
    caller: Caller,
    exps: ExperimentsDep,
    store: StoreDep,
) -> dict[str, Any]:
    caller.check_owner(store, experiment_id, "continue")
    if body.id is not None and body.id != experiment_id:
        raise InvalidArgument(f"body id {body.id} does not match experiment {experiment_id}")
    return _continue(experiment_id, body, exps, store)
