"""``type: azure`` through the Core API, on Azurite: a checkpoint stored, listed as blobs under
the container's prefix, restored and downloaded (determined/common/storage/_azure.py)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from determined import core, errors
from determined.common import storage


def test_core_checkpoints_round_trip_on_azure(
    azure_config: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    from azure.storage.blob import ContainerClient

    with core.init(checkpoint_storage=azure_config) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 3}) as (path, storage_id):
            (path / "model.pt").write_bytes(b"weights")
            (path / "sub").mkdir()
            (path / "sub" / "opt.pt").write_bytes(b"opt")
        with ctx.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "sub" / "opt.pt").read_bytes() == b"opt"
            assert json.loads((restored / "metadata.json").read_text())["steps_completed"] == 3
        ctx.checkpoint.download(storage_id, tmp_path / "dl")
    assert (tmp_path / "dl" / "model.pt").read_bytes() == b"weights"

    name, _, prefix = azure_config["container"].partition("/")
    client = ContainerClient.from_connection_string(azure_config["connection_string"], name)
    blobs = {b.name for b in client.list_blobs()}
    assert f"{prefix}/{storage_id}/model.pt" in blobs
    assert f"{prefix}/{storage_id}/.det_manifest.json" in blobs
    assert not any(b.endswith(".det_incomplete") for b in blobs)  # committed

    manager = storage.build(azure_config)
    manager.delete(storage_id)
    with pytest.raises(errors.CheckpointNotFound):
        manager.download(storage_id, tmp_path / "gone")


def test_account_url_with_a_credential(azurite_connection_string: str) -> None:
    """The other way to connect: ``account_url`` plus the account key as ``credential``."""
    parts = dict(p.split("=", 1) for p in azurite_connection_string.strip(";").split(";"))
    cfg = {
        "type": "azure",
        "container": "by-url",
        "account_url": parts["BlobEndpoint"],
        "credential": parts["AccountKey"],
    }
    manager = storage.build(cfg)
    src = pathlib.Path(__file__).parent
    manager.upload(src, "one", paths=["test_azure.py"])
    assert "test_azure.py" in {b for b in storage.build(cfg)._listing("one")}  # type: ignore[attr-defined]
