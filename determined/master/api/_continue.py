"""``POST /api/v1/experiments/continue {id, overrideConfig}``: the web UI's "Continue Trial" and
``det e continue``. An ended single-trial experiment trains its trial further, from its latest
checkpoint, under the config with the overrides merged in (a longer ``searcher.max_length``,
other hyperparameters); an ended grid or random search reruns the trials that did not
complete."""

from __future__ import annotations

import tempfile
from typing import Any

from fastapi import APIRouter, Request

from determined import errors
from determined.common import storage
from determined.common.expconf._storage import merge_storage
from determined.master import experiment, resources
from determined.master._errors import InvalidArgument
from determined.master.api import _redact
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.api._models import ContinueExperiment
from determined.master.api._services import services
from determined.master.api._wire import experiment_json
from determined.master.searcher import (
    max_length_units,
    optional_max_length,
    parse_hyperparameters,
)
from determined.master.store import (
    ExperimentRow,
    Store,
    TrialRow,
    _checkpoints,
    _experiments,
    _trials,
)

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
    exp: ExperimentRow, trials: list[TrialRow], override: dict[str, Any], sandboxed: bool
) -> dict[str, Any]:
    """The experiment's config with ``override`` merged in, validated, and checked for what a
    continue may change (as 0.37): a single-searcher experiment may change anything but the
    searcher's name and length unit (a length at or below what its trial trained completes at
    once, as in 0.37); a grid or random
    search takes no overrides (it reruns its unfinished trials as they were); other searchers
    are refused. Raises InvalidArgument (400) naming what to fix."""
    old = dict(exp["config"])
    if exp["archived"]:
        raise InvalidArgument(
            f"experiment {exp['id']} is archived; unarchive it first (det e unarchive "
            f"{exp['id']}) to continue it"
        )
    name = (old.get("searcher") or {}).get("name")
    if name not in ("single", "grid", "random"):
        raise InvalidArgument(
            f"Unsupported searcher type provided: {name!r}; only single, grid and random "
            "experiments can be continued (create a new experiment instead)"
        )
    for field in ("project", "workspace"):
        if field in override:
            raise InvalidArgument(
                f"'{field}' in override config cannot be specified, use `det experiment move` "
                f"first if you want to change the {field}"
            )
    if name != "single":
        if override:
            raise InvalidArgument(
                f"override config is provided and experiment is not single searcher, got "
                f"{name!r} instead: continue a {name} search without --config/a config file"
            )
        if optional_max_length(old["searcher"]) is None:
            raise InvalidArgument(
                f"experiment {exp['id']} sets no searcher.max_length: its trials decide their "
                "own length, so there is no length to continue them to (create a new experiment)"
            )
        return old
    # A redacted config sent back: its placeholders get the stored secrets again.
    merged = experiment.merge_configs(old, override)
    storage = override.get("checkpoint_storage")
    if isinstance(storage, dict) and "type" in storage:
        # Another storage type replaces the section, as the user means (the old type's keys,
        # host_path under s3, say, would be unknown keys); the same type merges key by key.
        merged["checkpoint_storage"] = merge_storage(storage, old.get("checkpoint_storage"))
    typed = experiment.parse_config(_redact.restore(merged, old))
    resources.check_bind_mounts(typed, sandboxed)
    config = typed.to_json_dict()
    new, was = config["searcher"], old["searcher"]
    if new.get("name") != "single":
        raise InvalidArgument(
            f"override config must have single searcher type got {new.get('name')!r} instead"
        )
    if _unit(new) != _unit(was):
        raise InvalidArgument(
            f"searcher.max_length must stay in {_unit(was)}, as the trial trained in them"
        )
    try:
        max_length_units(new, minimum=1)  # a length there is
    except errors.InvalidSearcherConfig as e:
        raise InvalidArgument(str(e)) from e
    try:
        parse_hyperparameters(config.get("hyperparameters"))
    except errors.InvalidSearcherConfig as e:
        raise InvalidArgument(f"hyperparameters: {e}") from e
    # A length at or below what the trial trained is accepted, as 0.37 does: the trial resumes
    # from its latest checkpoint, which is already there, and completes its operation at once.
    return config


def _carry_checkpoint(
    store: Store, experiment_id: int, override: dict[str, Any], sandboxed: bool
) -> None:
    """A continue into storage of another type: copy the checkpoint the trial resumes from
    (its newest completed one) into the new storage first, so the trial finds it there.
    The override is checked (a 400 when refused) before anything is copied."""
    moved = override.get("checkpoint_storage")
    if not isinstance(moved, dict) or "type" not in moved:
        return
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        trials = _trials.trials_of(conn, experiment_id)
        old = dict(exp["config"].get("checkpoint_storage") or {})
        if moved["type"] == old.get("type") or len(trials) != 1:
            return
        latest = _checkpoints.latest_completed(conn, int(trials[0]["id"]))
    continued_config(exp, trials, override, sandboxed)  # refused here, nothing is copied
    if latest is None:
        return
    uuid = str(latest["uuid"])
    try:
        source, target = storage.build(old), storage.build(merge_storage(moved, old))
        with tempfile.TemporaryDirectory(prefix="det-continue-") as tmp:
            source.download(uuid, tmp)
            target.upload(tmp, uuid)
    except Exception as e:
        raise InvalidArgument(
            f"cannot copy checkpoint {uuid}, which the trial resumes from, from the "
            f"{old.get('type')} storage into the new {moved['type']} storage: {e}"
        ) from e


def _continue(experiment_id: int, body: ContinueExperiment, request: Request) -> dict[str, Any]:
    found = services(request)
    exps, store, sandboxed = found.experiments, found.store, found.sandbox.active
    override = _override(body.override_config)
    _carry_checkpoint(store, experiment_id, override, sandboxed)
    exps.continue_trial(
        experiment_id, lambda exp, trials: continued_config(exp, trials, override, sandboxed)
    )
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, experiment_id)
        return {"experiment": experiment_json(conn, exp), "warnings": []}  # redacted


@router.post("/experiments/continue")
def continue_experiment(
    body: ContinueExperiment, caller: Caller, store: StoreDep, request: Request
) -> dict[str, Any]:
    """``{experiment, warnings}`` once the trials are ACTIVE again (400 when refused)."""
    caller.require_user()
    if body.id is None:
        raise InvalidArgument("id: the experiment to continue is required")
    caller.check_owner(store, body.id, "continue")
    return _continue(body.id, body, request)


@router.post("/experiments/{experiment_id}/continue")
def continue_experiment_by_path(
    experiment_id: int,
    body: ContinueExperiment,
    caller: Caller,
    store: StoreDep,
    request: Request,
) -> dict[str, Any]:
    caller.check_owner(store, experiment_id, "continue")
    if body.id is not None and body.id != experiment_id:
        raise InvalidArgument(f"body id {body.id} does not match experiment {experiment_id}")
    return _continue(experiment_id, body, request)
