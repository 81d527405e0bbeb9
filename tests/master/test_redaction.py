"""Issue #16 item 8: secrets in experiment configs (api/_redact.py) are hidden from everyone
but the experiment's own trials, and a redacted config sent back never overwrites them."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
import yaml
from _kit.master import MasterProcess, login
from hypothesis import given
from hypothesis import strategies as st

from determined.master._errors import InvalidArgument
from determined.master.api import _redact

SECRET_CONFIG = """
name: secretive
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
hyperparameters: {lr: 0.1}
checkpoint_storage:
  type: s3
  bucket: my-bucket
  access_key: AKIA-ACCESS-1
  secret_key: SECRET-KEY-2
environment:
  environment_variables:
    - WANDB_API_KEY=WANDB-SECRET-3
    - PLAIN=visible-name
"""
SECRETS = ("AKIA-ACCESS-1", "SECRET-KEY-2", "WANDB-SECRET-3")


def _clean(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"secrets leaked: {leaked}"


names = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8)
values = st.text(min_size=1, max_size=12).filter(lambda v: v != _redact.PLACEHOLDER)


@given(
    storage=st.dictionaries(st.sampled_from(sorted(_redact.SECRET_KEYS) + ["bucket"]), values),
    env=st.dictionaries(names, values, max_size=4),
    per_accelerator=st.booleans(),
)
def test_redact_then_restore_gives_back_the_config(
    storage: dict[str, str], env: dict[str, str], per_accelerator: bool
) -> None:
    entries = [f"{k}={v}" for k, v in env.items()]
    config: dict[str, Any] = {
        "checkpoint_storage": {"type": "s3", **storage},
        "environment": {
            "image": "x",
            "environment_variables": {"cpu": entries, "cuda": list(entries)}
            if per_accelerator
            else entries,
        },
    }
    hidden = _redact.redact(config)
    text = yaml.safe_dump(hidden)
    for key in storage:
        if key in _redact.SECRET_KEYS:
            assert hidden["checkpoint_storage"][key] == _redact.PLACEHOLDER
    assert _redact.restore(yaml.safe_load(text), config) == config
    if any(k in _redact.SECRET_KEYS for k in storage) or env:
        with pytest.raises(InvalidArgument, match="placeholder"):
            _redact.restore(hidden, None)


def test_a_secret_reused_through_a_yaml_anchor_is_hidden_everywhere() -> None:
    """Issue #35 item 8: the anchor's own mapping (here under ``data``) carries the secret
    too; it is hidden there as well, in the parsed config and in the YAML text."""
    text = (
        "data: &s {type: s3, bucket: b, secret_key: SECRET-KEY-2}\n"
        "env: &e [WANDB_API_KEY=WANDB-SECRET-3]\n"
        "checkpoint_storage: *s\n"
        "environment: {environment_variables: *e}\n"
    )
    _clean(_redact.redact_text(text))
    hidden = _redact.redact(yaml.safe_load(text))
    _clean(yaml.safe_dump(hidden))
    assert hidden["data"]["bucket"] == "b" and hidden["env"] == ["WANDB_API_KEY=********"]


@pytest.mark.e2e
def test_configs_are_redacted_except_for_the_trial(shared_master: MasterProcess) -> None:
    url = shared_master.url
    admin = shared_master.session()
    r = admin.post(url + "/api/v1/experiments", json={"config": SECRET_CONFIG})
    assert r.status_code == 200, r.text
    _clean(r.text)
    exp_id = int(r.json()["experiment"]["id"])
    got = admin.get(url + f"/api/v1/experiments/{exp_id}")
    _clean(got.text)
    storage = got.json()["experiment"]["config"]["checkpoint_storage"]
    assert storage["secret_key"] == "********" and storage["bucket"] == "my-bucket"
    env = got.json()["config"]["environment"]["environment_variables"]
    assert "WANDB_API_KEY=********" in str(env) and "PLAIN=" in str(env)
    _clean(admin.get(url + "/api/v1/experiments").text)
    _clean(admin.get(url + f"/api/v1/webui/experiments/{exp_id}/original_config").text)
    # The experiment's own trial reads the real config.
    trials = admin.get(url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    alloc = admin.post(url + f"/api/v1/dev/trials/{trials[0]['id']}/allocate", json={}).json()
    trial = shared_master.session(alloc["token"], allocation=True)
    real = trial.get(url + f"/api/v1/experiments/{exp_id}").json()["experiment"]["config"]
    assert real["checkpoint_storage"]["secret_key"] == "SECRET-KEY-2"

    # A fork of the redacted config keeps the secrets (owner or admin only); without a parent
    # the placeholder is refused.
    redacted = yaml.safe_dump(got.json()["experiment"]["config"])
    r = admin.post(url + "/api/v1/experiments", json={"config": redacted, "activate": False})
    assert r.status_code == 400 and "placeholder" in r.json()["message"]
    r = admin.post(
        url + "/api/v1/experiments",
        json={"config": redacted, "parentId": exp_id},
    )
    assert r.status_code == 200, r.text
    fork = int(r.json()["experiment"]["id"])
    ftrials = admin.get(url + f"/api/v1/experiments/{fork}/trials").json()["trials"]
    falloc = admin.post(url + f"/api/v1/dev/trials/{ftrials[0]['id']}/allocate", json={})
    fsess = shared_master.session(falloc.json()["token"], allocation=True)
    fconf = fsess.get(url + f"/api/v1/experiments/{fork}").json()["experiment"]["config"]
    assert fconf["checkpoint_storage"]["secret_key"] == "SECRET-KEY-2"
    assert "WANDB_API_KEY=WANDB-SECRET-3" in str(fconf["environment"]["environment_variables"])
    r = admin.post(url + "/api/v1/users", json={"user": {"username": "eve"}, "password": ""})
    assert r.status_code == 200
    eve = shared_master.session(login(url, "eve"))
    r = eve.post(url + "/api/v1/experiments", json={"config": redacted, "parentId": exp_id})
    assert r.status_code == 403 and "not yours" in r.json()["message"]

    # Continue with the redacted storage as an override: the stored secret stays.
    assert admin.post(url + f"/api/v1/experiments/{exp_id}/kill").status_code == 200
    admin.post(url + f"/api/v1/dev/allocations/{alloc['allocationId']}/exit", json={"exitCode": 1})
    deadline = time.monotonic() + 20
    while admin.get(url + f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] not in (
        "STATE_CANCELED",
        "STATE_ERROR",
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    override = yaml.safe_dump(
        {"searcher": {"max_length": 20}, "checkpoint_storage": storage}, sort_keys=False
    )
    r = admin.post(
        url + "/api/v1/experiments/continue", json={"id": exp_id, "overrideConfig": override}
    )
    assert r.status_code == 200, r.text
    _clean(r.text)
    trials = admin.get(url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    again = admin.post(url + f"/api/v1/dev/trials/{trials[0]['id']}/allocate", json={}).json()
    tsess = shared_master.session(again["token"], allocation=True)
    conf = tsess.get(url + f"/api/v1/experiments/{exp_id}").json()["experiment"]["config"]
    assert conf["checkpoint_storage"]["secret_key"] == "SECRET-KEY-2"
    assert conf["searcher"]["max_length"] == 20


@pytest.mark.e2e
def test_det_describe_shows_no_secret(shared_master: MasterProcess, tmp_path: Any) -> None:
    import subprocess
    import sys

    from _kit.master import clean_env

    admin = shared_master.session()
    r = admin.post(shared_master.url + "/api/v1/experiments", json={"config": SECRET_CONFIG})
    exp_id = r.json()["experiment"]["id"]
    env = clean_env(tmp_path)
    env.update(DET_USER="admin", DET_PASS="")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "determined.cli",
            "-m",
            shared_master.url,
            "e",
            "describe",
            str(exp_id),
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    _clean(out.stdout)
    assert "********" in out.stdout
    assert requests.get(shared_master.url + "/info").ok
