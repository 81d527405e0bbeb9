"""Workspace settings as 0.37 (``det workspace create|edit`` with a default checkpoint storage,
default pools and an agent user/group; ``det workspace list-pools``) and resource pool
bindings (``det rp bindings``), on a real master with our CLI and 0.37's. An experiment
created in a workspace with a checkpoint storage and no storage of its own checkpoints there."""

from __future__ import annotations

import json
import pathlib
import subprocess
from typing import Any

import pytest
import yaml
from _kit.cli import Det
from _kit.reference import Ref
from _kit.trial_cluster import Cluster, config

pytestmark = pytest.mark.e2e


def _det(cluster: Cluster, home: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return Det(home, cluster.url, user="admin")(*args)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _create_in(cluster: Cluster, project_id: int, cfg: dict[str, Any]) -> dict[str, Any]:
    from _kit.trial_cluster import TRAIN_PY, model_definition

    body = {
        "config": yaml.safe_dump(cfg),
        "modelDefinition": model_definition({"train.py": TRAIN_PY}),
        "projectId": project_id,
        "activate": True,
    }
    r = cluster.s.post(cluster.url + "/api/v1/experiments", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json()["experiment"])


def test_a_workspaces_storage_and_pool_are_its_experiments_defaults(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    home = tmp_path / "home"
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "team-ckpts")}
    created = json.loads(
        _ok(
            _det(
                cluster,
                home,
                "workspace",
                "create",
                "team",
                "--checkpoint-storage-config",
                json.dumps(storage),
                "--default-compute-pool",
                "default",
                "--agent-uid",
                "1000",
                "--agent-user",
                "alice",
                "--json",
            )
        )
    )
    assert created["checkpointStorageConfig"] == storage
    assert created["defaultComputePool"] == "default"
    assert created["agentUserGroup"] == {"agentUid": 1000, "agentUser": "alice"}
    r = cluster.s.post(
        cluster.url + f"/api/v1/workspaces/{created['id']}/projects", json={"name": "p"}
    )
    assert r.status_code == 200, r.text
    project_id = int(r.json()["project"]["id"])

    # No storage of its own: the workspace's, where its checkpoints then land.
    exp = _create_in(cluster, project_id, config(tmp_path / "out", max_length=2))
    got = cluster.get(f"/api/v1/experiments/{exp['id']}")["config"]
    assert got["checkpoint_storage"]["host_path"] == storage["host_path"]
    assert got["resources"]["resource_pool"] == "default"
    cluster.wait_experiment(exp["id"], "STATE_COMPLETED", timeout=60)
    [ckpt, *_] = cluster.get(f"/api/v1/experiments/{exp['id']}/checkpoints")["checkpoints"]
    assert (tmp_path / "team-ckpts" / ckpt["uuid"]).is_dir()
    # Its own storage of the same type wins key by key; another type replaces it whole.
    own = {"type": "shared_fs", "host_path": str(tmp_path / "own")}
    mine = _create_in(cluster, project_id, {**config(tmp_path / "o2"), "checkpoint_storage": own})
    cfg = cluster.get(f"/api/v1/experiments/{mine['id']}")["config"]
    assert cfg["checkpoint_storage"]["host_path"] == str(tmp_path / "own")
    s3 = {"type": "s3", "bucket": "b", "secret_key": "hush", "access_key": "k"}
    other = _create_in(cluster, project_id, {**config(tmp_path / "o3"), "checkpoint_storage": s3})
    cfg = cluster.get(f"/api/v1/experiments/{other['id']}")["config"]
    assert (
        cfg["checkpoint_storage"]["type"] == "s3" and "host_path" not in cfg["checkpoint_storage"]
    )
    for exp_id in (mine["id"], other["id"]):
        cluster.post(f"/api/v1/experiments/{exp_id}/kill")

    # Edits: a storage from a YAML file, its secrets never shown; pools this master lacks and
    # Kubernetes namespaces are refused with a reason.
    file = tmp_path / "storage.yaml"
    file.write_text(yaml.safe_dump(s3))
    edited = json.loads(
        _ok(
            _det(
                cluster,
                home,
                "workspace",
                "edit",
                "team",
                "--checkpoint-storage-config-file",
                str(file),
                "--json",
            )
        )
    )
    assert edited["checkpointStorageConfig"]["bucket"] == "b"
    assert edited["checkpointStorageConfig"]["secret_key"] != "hush"
    bad = _det(cluster, home, "workspace", "edit", "team", "--default-compute-pool", "gpus")
    assert bad.returncode != 0 and "resource pool 'gpus' does not exist" in bad.stderr
    k8s = _det(cluster, home, "workspace", "create", "k", "--namespace", "ns")
    assert k8s.returncode != 0 and "Kubernetes" in k8s.stderr
    broken = {"type": "tape"}  # no such storage
    r = cluster.s.post(
        cluster.url + "/api/v1/workspaces",
        json={"name": "broken", "checkpointStorageConfig": broken},
    )
    assert r.status_code == 400 and "checkpointStorageConfig" in r.text

    pools = _ok(_det(cluster, home, "workspace", "list-pools", "team"))
    assert "team" in pools and "default" in pools


def test_pool_bindings_follow_0_37s_rules_for_the_one_default_pool(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    home = tmp_path / "home"
    _ok(_det(cluster, home, "workspace", "create", "team"))
    refused = _det(cluster, home, "rp", "bindings", "add", "default", "team")
    assert refused.returncode != 0
    assert "default resource pool default cannot be bound to any workspace" in refused.stderr
    missing = _det(cluster, home, "rp", "bindings", "add", "gpus", "team")
    assert missing.returncode != 0 and "doesn't exist" in missing.stderr
    listed = _ok(_det(cluster, home, "rp", "bindings", "list-workspaces", "default"))
    assert "default" in listed and "team" not in listed

    ref = Ref(cluster.master, tmp_path / "ref")
    storage = json.dumps({"type": "shared_fs", "host_path": str(tmp_path / "ref-ckpts")})
    ref.det("workspace", "create", "refws", "--checkpoint-storage-config", storage)
    [ws] = [w for w in cluster.get("/api/v1/workspaces")["workspaces"] if w["name"] == "refws"]
    assert ws["checkpointStorageConfig"]["host_path"] == str(tmp_path / "ref-ckpts")
    ref.det("workspace", "edit", "refws", "--default-aux-pool", "default")
    assert "default" in ref.det("workspace", "list-pools", "refws")
    # 0.37's CLI logs in as determined, not an admin: as 0.37, the pool is checked first (its
    # e2e test_rp_workspace_mapping expects this message for a user).
    refused = ref.det("rp", "bindings", "add", "default", "refws", ok=False)
    assert "default resource pool default cannot be bound to any workspace" in refused
