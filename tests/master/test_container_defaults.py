"""0.37's ``task_container_defaults`` in the master config (the master's and each resource
pool's): laid under every new experiment's and task's config, and a startup hook run before
each process (``experiment/_container_defaults.py``)."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess
from hypothesis import given
from hypothesis import strategies as st

from determined.master import __main__ as master_main
from determined.master.experiment import ContainerDefaults, ContainerDefaultsError

_names = st.sampled_from(["A", "B", "C", "D"])
_vars = st.lists(st.tuples(_names, st.sampled_from(["1", "2", "x=y"])), max_size=6)


def _last_values(entries: list[str]) -> dict[str, str]:
    """What a process sees: the last ``KEY=VALUE`` of each name wins."""
    out: dict[str, str] = {}
    for entry in entries:
        name, _, value = entry.partition("=")
        out[name] = value
    return out


@given(master=_vars, pool=_vars, own=_vars)
def test_the_config_wins_over_the_pool_which_wins_over_the_master(
    master: list[tuple[str, str]], pool: list[tuple[str, str]], own: list[tuple[str, str]]
) -> None:
    as_env = lambda pairs: [f"{k}={v}" for k, v in pairs]  # noqa: E731
    defaults = ContainerDefaults.parse(
        {"environment_variables": as_env(master)},
        [
            {
                "pool_name": "default",
                "task_container_defaults": {"environment_variables": as_env(pool)},
            }
        ],
    )
    config: dict[str, Any] = {"environment": {"environment_variables": as_env(own)}}
    out = defaults.apply(config)["environment"]["environment_variables"]
    assert set(out) == {"cpu", "cuda", "rocm"}
    seen = _last_values(out["cpu"])
    expected = {
        **_last_values(as_env(master)),
        **_last_values(as_env(pool)),
        **_last_values(as_env(own)),
    }
    assert seen == expected
    assert config == {"environment": {"environment_variables": as_env(own)}}  # not changed


@given(
    own=st.lists(st.sampled_from(["/a", "/b", "rel"]), unique=True),
    tcd=st.lists(st.sampled_from(["/a", "/c", "rel"]), unique=True),
)
def test_bind_mounts_keep_the_configs_own_for_a_container_path(
    own: list[str], tcd: list[str]
) -> None:
    mount = lambda path, host: {"host_path": host, "container_path": path}  # noqa: E731
    defaults = ContainerDefaults.parse({"bind_mounts": [mount(p, "/tcd") for p in tcd]})
    out = defaults.apply({"bind_mounts": [mount(p, "/own") for p in own]})["bind_mounts"]
    assert out[: len(own)] == [mount(p, "/own") for p in own]
    assert out[len(own) :] == [mount(p, "/tcd") for p in tcd if p not in own]


def test_other_pools_and_unset_values() -> None:
    defaults = ContainerDefaults.parse(
        {"startup_hook": "echo master", "image": "img:1", "log_policies": [{"pattern": "x"}]},
        [
            {"pool_name": "default", "task_container_defaults": {"startup_hook": "echo pool"}},
            {"pool_name": "other", "task_container_defaults": None},
        ],
    )
    assert defaults.startup_hook(None) == "echo pool"
    assert defaults.startup_hook("other") == "echo master"
    out = defaults.apply(
        {"environment": {"image": "mine"}, "resources": {"resource_pool": "other"}}
    )
    assert out["environment"]["image"] == "mine" and out["log_policies"] == [{"pattern": "x"}]
    task = defaults.apply({"entrypoint": "true"}, experiment=False)
    assert task == {"entrypoint": "true", "environment": {"image": "img:1"}}
    assert ContainerDefaults().apply({"a": 1}) == {"a": 1}


@pytest.mark.parametrize(
    ("master", "pools", "message"),
    [
        ({"startup_hok": "x"}, None, "unknown keys startup_hok"),
        ({"startup_hook": ["echo"]}, None, "startup_hook must be a shell command"),
        ({"environment_variables": {"tpu": ["A=1"]}}, None, "unknown accelerators tpu"),
        ({"bind_mounts": [{"container_path": "/x"}]}, None, "bind_mounts must be a list"),
        (None, [{"task_container_defaults": {}}], "resource_pools[0] needs a pool_name"),
        (None, {"default": {}}, "resource_pools must be a list"),
        (None, [{"pool_name": "gpu", "max_slots": 8}], "max_slots are settings of 0.37's agent"),
    ],
)
def test_bad_sections_say_what_to_fix(master: Any, pools: Any, message: str) -> None:
    with pytest.raises(ContainerDefaultsError) as e:
        ContainerDefaults.parse(master, pools)
    assert message in str(e.value)


def test_a_bad_section_in_the_master_config_stops_the_master(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "master.yaml"
    cfg.write_text("task_container_defaults:\n  shm_size: 4\n")
    with pytest.raises(SystemExit):
        master_main.parse_args(["--config-file", str(cfg)])
    assert "task_container_defaults: unknown keys shm_size" in capsys.readouterr().err


_MASTER_YAML = """
cpu_slots: 1
task_container_defaults:
  startup_hook: echo hello from master tcd startup hook
  environment_variables: [FROM_MASTER=m]
resource_pools:
  - pool_name: default
    task_container_defaults:
      environment_variables: [SOMEVAR=SOMEVAL, OVERRIDDEN=pool]
      startup_hook: echo hello from rp tcd startup hook
"""


@pytest.mark.e2e
def test_a_masters_defaults_reach_commands_and_experiments(tmp_path: pathlib.Path) -> None:
    cfg = tmp_path / "master.yaml"
    cfg.write_text(_MASTER_YAML)
    with MasterProcess(tmp_path / "m", config_file=cfg) as m:
        s = m.session()
        shown = s.get(m.url + "/api/v1/master/config").json()["config"]
        assert shown["task_container_defaults"]["startup_hook"].startswith("echo hello from master")
        [pool] = shown["resource_pools"]
        assert (
            pool["task_container_defaults"]["startup_hook"] == "echo hello from rp tcd startup hook"
        )

        env = {"environment_variables": ["OVERRIDDEN=mine"]}
        config = {"entrypoint": "echo vars $SOMEVAR $OVERRIDDEN $FROM_MASTER", "environment": env}
        r = s.post(m.url + "/api/v1/commands", json={"config": config})
        assert r.status_code == 200, r.text
        task_id = r.json()["command"]["id"]
        deadline = time.monotonic() + 60
        while "vars " not in (log := _log(s, m.url, task_id)):
            assert time.monotonic() < deadline, log
            time.sleep(0.3)
        # The pool's hook (it wins over the master's), then the command, with the variables.
        assert "hello from rp tcd startup hook" in log and "hello from master" not in log
        assert "vars SOMEVAL mine m" in log, log
        shown_task = s.get(m.url + f"/api/v1/commands/{task_id}").json()["config"]
        cpu = shown_task["environment"]["environment_variables"]["cpu"]
        assert cpu == ["SOMEVAR=SOMEVAL", "OVERRIDDEN=pool", "FROM_MASTER=m", "OVERRIDDEN=mine"]

        exp = {
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "x", "max_length": 1},
            "hyperparameters": {},
        }
        r = s.post(
            m.url + "/api/v1/experiments", json={"config": json.dumps(exp), "activate": False}
        )
        assert r.status_code == 200, r.text
        stored = r.json()["experiment"]["config"]["environment"]["environment_variables"]
        # (values shown redacted: environment variables may hold secrets)
        assert [v.split("=")[0] for v in stored["cpu"]] == ["SOMEVAR", "OVERRIDDEN", "FROM_MASTER"]
        assert "SOMEVAR" not in json.dumps(r.json()["experiment"].get("originalConfig") or "")


def _log(s: requests.Session, url: str, task_id: str) -> str:
    logs = s.get(url + f"/api/v1/tasks/{task_id}/logs").json()["logs"]
    return "\n".join(str(x["log"]) for x in logs)
