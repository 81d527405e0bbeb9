"""resources, environment and bind_mounts."""

from __future__ import annotations

import pytest

from determined.common.expconf import (
    Device,
    EnvironmentVariables,
    ExperimentConfig,
    InvalidExperimentConfig,
    parse_experiment_config,
)

BASE = {"entrypoint": "a:B", "searcher": {"name": "single", "metric": "m", "max_length": 1}}


def parse(**top: object) -> ExperimentConfig:
    return parse_experiment_config({**BASE, **top})


def problems(**top: object) -> dict[str, str]:
    with pytest.raises(InvalidExperimentConfig) as info:
        parse(**top)
    return dict(info.value.problems)


def test_resources_fields() -> None:
    r = parse(
        resources={
            "slots_per_trial": 0,
            "max_slots": 8,
            "priority": 1,
            "shm_size": "4G",
            "resource_pool": "gpu",
            "devices": ["/dev/a:/dev/b", {"host_path": "/x", "container_path": "/y", "mode": "r"}],
        }
    ).resources
    assert (r.slots_per_trial, r.max_slots, r.priority, r.shm_size) == (0, 8, 1, "4G")
    assert r.devices == [
        Device(host_path="/dev/a", container_path="/dev/b", mode="mrw"),
        Device(host_path="/x", container_path="/y", mode="r"),
    ]


def test_environment_forms_normalised() -> None:
    env = parse(
        environment={"image": "img:1", "environment_variables": ["A=1", "B=x=y"]}
    ).environment
    assert env.image.to_json_dict() == {"cpu": "img:1", "cuda": "img:1", "rocm": "img:1"}
    assert env.environment_variables.as_dict() == {"A": "1", "B": "x=y"}
    assert env.environment_variables.as_dict("cuda") == {"A": "1", "B": "x=y"}
    legacy = parse(
        environment={"image": {"gpu": "g"}, "environment_variables": {"gpu": ["G=1"]}}
    ).environment
    assert legacy.image.to_json_dict() == {"cuda": "g"}
    assert legacy.environment_variables == EnvironmentVariables(cuda=["G=1"])


def test_environment_container_parts_kept() -> None:
    raw = {
        "ports": {"tb": 6006},
        "force_pull_image": True,
        "pod_spec": {"spec": {}},
        "add_capabilities": ["SYS_ADMIN"],
        "registry_auth": {"username": "u"},
        "proxy_ports": [{"proxy_port": 8000}],
    }
    out = parse(environment=raw).to_json_dict()["environment"]
    assert {k: out[k] for k in raw} == raw


def test_bind_mounts_defaults() -> None:
    out = parse(bind_mounts=[{"host_path": "/data", "container_path": "data"}]).to_json_dict()
    assert out["bind_mounts"] == [
        {"host_path": "/data", "container_path": "data", "read_only": False,
         "propagation": "rprivate"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("top", "path", "fragment"),
    [
        ({"resources": {"slots": "two"}}, "resources.slots", "integer"),
        ({"resources": {"slots_per_trial": -1}}, "resources.slots_per_trial", "greater"),
        ({"resources": {"priority": 100}}, "resources.priority", "less than or equal to 99"),
        ({"resources": {"priority": 0}}, "resources.priority", "greater than or equal to 1"),
        ({"resources": {"shm_size": "lots"}}, "resources.shm_size", "memory size"),
        ({"resources": {"devices": ["nocolon"]}}, "resources.devices[0]", "host:container"),
        ({"resources": {"gpus": 1}}, "resources.gpus", "allowed keys here are"),
        ({"environment": {"image": 3}}, "environment.image", ""),
        ({"environment": {"environment_variables": "A=1"}}, "environment.environment_vari", ""),
        ({"environment": {"ports": {"a": "x"}}}, "environment.ports.a", "integer"),
        ({"bind_mounts": [{"host_path": "/a"}]}, "bind_mounts[0].container_path", "is required"),
        ({"bind_mounts": [{"host_path": "a", "container_path": "b"}]}, "bind_mounts[0]", "abs"),
        ({"bind_mounts": [{"host_path": "/a", "container_path": "."}]}, "bind_mounts[0]", '"."'),
        ({"bind_mounts": [3]}, "bind_mounts[0]", "must be a mapping"),
    ],
)  # fmt: skip
def test_errors(top: dict, path: str, fragment: str) -> None:
    found = problems(**top)
    path = next((p for p in found if p.startswith(path)), path)
    assert path in found, found
    assert fragment in found[path], found[path]
