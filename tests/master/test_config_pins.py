"""What a user sees of an experiment config, pinned byte for byte (issue 33 part 1): the config
and ``originalConfig`` that ``POST /api/v1/experiments`` answers, that ``GET
/api/v1/experiments/{id}`` (and so ``det e describe``) shows, and the row the store keeps, for a
few representative configs: plain, every searcher and hyperparameter kind, secrets, a template,
a fork of a redacted config, a workspace's defaults and a continue's override.

The pins are in tests/fixtures/config_pins.json; ``UPDATE_CONFIG_PINS=1`` rewrites them (only
for a change meant to be seen, and say so in its note)."""

from __future__ import annotations

import json
import os
import pathlib
import time
from typing import Any

import pytest
import requests
import sqlalchemy as sa
import yaml
from _kit.master import MasterProcess

pytestmark = pytest.mark.e2e

PINS = pathlib.Path(__file__).parent.parent / "fixtures" / "config_pins.json"

PLAIN = """\
name: plain
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
reproducibility: {experiment_seed: 7}
"""

RICH = """\
name: rich
description: every kind
labels: [b, a, b]
entrypoint: [python3, train.py, --flag]
data: {url: "http://x", n: 3}
records_per_epoch: 640
min_validation_period: {records: 320}
min_checkpoint_period: {epochs: 1}
scheduling_unit: 5
max_restarts: 0
perform_initial_validation: true
checkpoint_policy: all
searcher:
  name: adaptive_asha
  metric: acc
  smaller_is_better: false
  max_length: {batches: 64}
  max_trials: 4
  max_rungs: 3
  divisor: 2
hyperparameters:
  global_batch_size: 32
  lr: {type: log, minval: -4, maxval: -1, base: 10}
  width: {type: int, minval: 4, maxval: 16}
  drop: {type: double, minval: 0.0, maxval: 0.5}
  act: {type: categorical, vals: [relu, tanh]}
  nested: {depth: {type: const, val: 2}, k: 3}
resources: {slots_per_trial: 1, max_slots: 4, priority: 10}
environment:
  environment_variables: {cpu: [A=1, WANDB_API_KEY=hush], cuda: [B=2]}
bind_mounts:
  - {host_path: /tmp, container_path: scratch, read_only: true}
optimizations: {aggregation_frequency: 2, average_training_metrics: false}
profiling: {enabled: true, begin_on_batch: 2, end_after_batch: 9}
log_policies:
  - {pattern: "CUDA out of memory", action: {type: cancel_retries}}
reproducibility: {experiment_seed: 11}
checkpoint_storage:
  type: s3
  bucket: pins
  access_key: AKIA-PIN
  secret_key: SECRET-PIN
  save_trial_best: 2
"""

TEMPLATE = {
    "description": "from the template",
    "searcher": {"name": "single", "metric": "loss", "max_length": 4},
    "hyperparameters": {"lr": 0.1, "width": 8},
    "environment": {"environment_variables": ["FROM_TEMPLATE=1"]},
}

TEMPLATED = """\
name: templated
entrypoint: python3 train.py
hyperparameters: {lr: 0.5}
reproducibility: {experiment_seed: 13}
"""

IN_WORKSPACE = """\
name: in-workspace
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_length: 3, max_trials: 2}
hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1.0}}
checkpoint_storage: {save_trial_latest: 3}
reproducibility: {experiment_seed: 17}
"""


def _create(s: requests.Session, url: str, body: dict[str, Any]) -> tuple[int, str]:
    r = s.post(url + "/api/v1/experiments", json={"activate": False, **body})
    assert r.status_code == 200, r.text
    return int(r.json()["experiment"]["id"]), r.text


def _created_view(text: str) -> str:
    """The created experiment's config and originalConfig, in the answer's key order."""
    body = json.loads(text)
    return json.dumps([body["config"], body["experiment"]["originalConfig"]])


def _described_view(s: requests.Session, url: str, exp_id: int) -> str:
    body = json.loads(s.get(url + f"/api/v1/experiments/{exp_id}").text)
    return json.dumps([body["config"], body["experiment"]["originalConfig"]])


def _stored_view(m: MasterProcess, exp_id: int) -> str:
    engine = sa.create_engine(m.store_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT config, original_config FROM experiments WHERE id = :id"),
                {"id": exp_id},
            ).one()
    finally:
        engine.dispose()
    config = row[0] if isinstance(row[0], dict) else json.loads(row[0])
    return json.dumps([config, row[1]])


def _wait_ended(s: requests.Session, url: str, exp_id: int) -> None:
    deadline = time.monotonic() + 30
    while s.get(url + f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] not in (
        "STATE_CANCELED",
        "STATE_COMPLETED",
        "STATE_ERROR",
    ):
        assert time.monotonic() < deadline, "the experiment did not end"
        time.sleep(0.1)


def _views(m: MasterProcess) -> dict[str, str]:
    url, s = m.url, m.session()
    views: dict[str, str] = {}

    def pin(name: str, exp_id: int, created: str) -> None:
        views[f"{name}.created"] = _created_view(created)
        views[f"{name}.described"] = _described_view(s, url, exp_id)
        views[f"{name}.stored"] = _stored_view(m, exp_id)

    for name, text in (("plain", PLAIN), ("rich", RICH)):
        pin(name, *_create(s, url, {"config": text}))

    r = s.post(url + "/api/v1/templates/pinned", json={"name": "pinned", "config": TEMPLATE})
    assert r.status_code == 200, r.text
    pin("templated", *_create(s, url, {"config": TEMPLATED, "template": "pinned"}))

    rich_id = _find(s, url, "rich")
    redacted = s.get(url + f"/api/v1/experiments/{rich_id}").json()["config"]
    redacted["name"] = "forked"
    fork_text = yaml.safe_dump(redacted, sort_keys=False)
    pin("forked", *_create(s, url, {"config": fork_text, "parentId": rich_id}))

    storage = {"type": "s3", "bucket": "team", "secret_key": "TEAM-SECRET", "prefix": "p"}
    r = s.post(
        url + "/api/v1/workspaces",
        json={"name": "pins", "checkpointStorageConfig": storage, "defaultComputePool": "default"},
    )
    assert r.status_code == 200, r.text
    ws = int(r.json()["workspace"]["id"])
    r = s.post(url + f"/api/v1/workspaces/{ws}/projects", json={"name": "p"})
    assert r.status_code == 200, r.text
    project = int(r.json()["project"]["id"])
    pin("workspace", *_create(s, url, {"config": IN_WORKSPACE, "projectId": project}))

    plain_id = _find(s, url, "plain")
    assert s.post(url + f"/api/v1/experiments/{plain_id}/kill").status_code == 200
    _wait_ended(s, url, plain_id)
    override = "searcher: {max_length: 20}\nhyperparameters: {lr: 0.2}\n"
    r = s.post(
        url + "/api/v1/experiments/continue", json={"id": plain_id, "overrideConfig": override}
    )
    assert r.status_code == 200, r.text
    views["continued.described"] = _described_view(s, url, plain_id)
    views["continued.stored"] = _stored_view(m, plain_id)
    # The default storage lies under the master's data dir (its DET_HOME), a new one each run.
    return {k: v.replace(str(m.data_dir), "<DET_HOME>") for k, v in views.items()}


def _find(s: requests.Session, url: str, name: str) -> int:
    exps = s.get(url + "/api/v1/experiments", params={"name": name}).json()["experiments"]
    [exp] = [e for e in exps if e["name"] == name]
    return int(exp["id"])


def test_configs_a_user_sees_are_unchanged(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path / "master") as m:
        views = _views(m)
    if os.environ.get("UPDATE_CONFIG_PINS"):
        PINS.write_text(json.dumps(views, indent=1) + "\n")
    pinned = json.loads(PINS.read_text())
    assert sorted(views) == sorted(pinned)
    for key, view in views.items():
        assert view == pinned[key], key
