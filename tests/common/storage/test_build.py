"""Storage managers from a checkpoint_storage section and from core.init's argument."""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import subprocess
from typing import Any

import pytest

from determined import errors
from determined.common import storage
from determined.common.storage import (
    DirectoryStorageManager,
    GCSStorageManager,
    S3StorageManager,
    SharedFSStorageManager,
)


def test_shared_fs_base_is_host_path_plus_storage_path(tmp_path: pathlib.Path) -> None:
    sm = storage.build({"type": "shared_fs", "host_path": "/mnt/nfs", "storage_path": "ckpts"})
    assert isinstance(sm, SharedFSStorageManager)
    assert sm.base_path == pathlib.Path("/mnt/nfs/ckpts")
    sm = storage.build({"type": "shared_fs", "host_path": "/mnt/nfs", "storage_path": "/mnt/nfs/x"})
    assert sm.base_path == pathlib.Path("/mnt/nfs/x")


def test_shared_fs_on_a_cluster_uses_the_container_mount() -> None:
    cfg = {"type": "shared_fs", "host_path": "/mnt/nfs", "storage_path": "ckpts"}
    sm = storage.build(cfg, container_path="/determined_shared_fs")
    assert sm.base_path == pathlib.Path("/determined_shared_fs/ckpts")  # type: ignore[attr-defined]


def test_legacy_checkpoint_path_and_gc_keys_are_accepted() -> None:
    cfg = {
        "type": "shared_fs",
        "host_path": "/mnt/nfs",
        "checkpoint_path": "old",
        "propagation": "rprivate",
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }
    assert storage.build(cfg).base_path == pathlib.Path("/mnt/nfs/old")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "cfg,match",
    [
        ({"type": "shared_fs", "host_path": "rel"}, "absolute"),
        ({"type": "shared_fs", "host_path": "/a", "storage_path": "/b"}, "under host_path"),
        ({"type": "shared_fs", "host_path": "/a", "storage_path": "../b"}, "under host_path"),
        ({"type": "shared_fs"}, "needs \\['host_path'\\]"),
        ({"type": "shared_fs", "host_path": "/a", "bucket": "b"}, "does not take \\['bucket'\\]"),
        ({"type": "directory"}, "container_path"),
        ({"type": "s3", "bucket": "b", "prefix": "a/../b"}, "'..'"),
        ({"type": "gcs", "bucket": "b", "prefix": "../b"}, "'..'"),
        ({"type": "s3"}, "bucket"),
        ({"type": "azure"}, "needs \\['container'\\]"),
        ({"type": "azure", "container": "c"}, "connection_string or account_url"),
        ({"type": "azure", "container": "c/../d", "connection_string": "x"}, "'..'"),
        ({"type": "azure", "container": "c", "account_url": "u", "bucket": "b"}, "does not take"),
    ],
)
def test_bad_configs_raise_storage_config_error(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(errors.StorageConfigError, match=match):
        storage.build(cfg)


def test_storage_config_error_is_a_value_error() -> None:
    assert issubclass(errors.StorageConfigError, ValueError)


def test_unknown_type_raises_type_error() -> None:
    with pytest.raises(TypeError, match="unknown checkpoint_storage type 'hdfs'; use one of"):
        storage.build({"type": "hdfs"})


@pytest.mark.parametrize("config", [{}, {"type": None}, {"type": 4}, {"type": ["s3"]}])
def test_a_missing_or_non_string_type_raises_value_error(config: dict[str, Any]) -> None:
    with pytest.raises(
        ValueError, match=r"set type to one of \['azure', 'directory', 'gcs', 's3', 'shared_fs'\]"
    ):
        storage.build(config)


REF_PYTHON = pathlib.Path(__file__).resolve().parents[3] / ".refvenv" / "bin" / "python"


@pytest.mark.skipif(not REF_PYTHON.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_the_same_exception_classes_as_the_reference() -> None:
    configs = [{}, {"type": None}, {"type": 4}, {"type": "hdfs"}]
    program = (
        "import json, sys\n"
        "from determined.common import storage\n"
        "for c in json.load(sys.stdin):\n"
        "    try: storage.build(c, container_path=None); print('ok')\n"
        "    except Exception as e: print(type(e).__name__)\n"
    )
    done = subprocess.run(
        [str(REF_PYTHON), "-I", "-c", program],  # -I: the reference, not this tree
        input=json.dumps(configs),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    ours = []
    for c in configs:
        try:
            storage.build(c)
            ours.append("ok")
        except Exception as e:
            ours.append(type(e).__name__)
    assert ours == done.stdout.split() == ["ValueError", "ValueError", "ValueError", "TypeError"]


def test_directory_and_s3_and_gcs_configs() -> None:
    sm = storage.build({"type": "directory", "container_path": "/scratch/c"})
    assert type(sm) is DirectoryStorageManager
    assert sm.base_path == pathlib.Path("/scratch/c")
    s3 = storage.build({"type": "s3", "bucket": "bk", "prefix": "/p/q/", "endpoint_url": None})
    assert isinstance(s3, S3StorageManager)
    assert repr(s3) == "S3StorageManager(s3://bk/p/q)"


# core.init(checkpoint_storage=...): docs/reference/harness.md §2 and §19 item 3.


def test_init_arg_none_is_shared_fs_at_the_default(tmp_path: pathlib.Path) -> None:
    sm = storage.from_init_arg(None, tmp_path / "ckpts")
    assert isinstance(sm, SharedFSStorageManager)
    assert sm.base_path == tmp_path / "ckpts"


@pytest.mark.parametrize("spec", ["/x/ckpts", "file:///x/ckpts", "file:/x/ckpts"])
def test_init_arg_path_or_file_url_is_shared_fs(spec: str) -> None:
    sm = storage.from_init_arg(spec, "/unused")
    assert isinstance(sm, SharedFSStorageManager)
    assert sm.base_path == pathlib.Path("/x/ckpts")


def test_init_arg_empty_string_is_the_working_directory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sm = storage.from_init_arg("", "/unused")
    assert sm.base_path == pathlib.Path(os.getcwd())  # type: ignore[attr-defined]


def test_init_arg_cloud_urls() -> None:
    s3 = storage.from_init_arg("s3://bucket/some/prefix", "/unused")
    assert repr(s3) == "S3StorageManager(s3://bucket/some/prefix)"


def test_init_arg_gs_url_selects_gcs() -> None:
    try:
        sm = storage.from_init_arg("gs://bucket/p", "/unused")
    except ImportError as e:  # google-cloud-storage is an optional extra
        assert "redetermined[gcs]" in str(e)
    else:
        assert isinstance(sm, GCSStorageManager)


@pytest.mark.parametrize(
    "spec,match",
    [
        ("file://host/x", "names a host"),
        ("hdfs://nn/x", "unsupported scheme"),
        ("azure://c/x", "unsupported scheme"),
        ("s3:///x", "no bucket"),
        # The reference refuses these too ("Malformed"); urlparse would cut the path there.
        ("/x/ck;pts", "';'"),
        ("/x/ckpts?v=1", "'\\?'"),
        ("s3://bucket/p#frag", "'#'"),
    ],
)
def test_init_arg_bad_strings_raise_value_error(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        storage.from_init_arg(spec, "/unused")


def test_from_string_takes_the_references_parameter() -> None:
    """0.37: ``from_string(shortcut: str)``; a keyword call binds the same name here."""
    assert list(inspect.signature(storage.from_string).parameters) == ["shortcut"]
    sm = storage.from_string(shortcut="/x/ckpts")
    assert isinstance(sm, SharedFSStorageManager) and sm.base_path == pathlib.Path("/x/ckpts")


def test_init_arg_shared_fs_dict_raises_value_error() -> None:
    with pytest.raises(ValueError, match="pass the directory as a string"):
        storage.from_init_arg({"type": "shared_fs", "host_path": "/x"}, "/unused")


def test_init_arg_other_dicts_go_through_build() -> None:
    sm = storage.from_init_arg({"type": "directory", "container_path": "/d"}, "/unused")
    assert type(sm) is DirectoryStorageManager
    with pytest.raises(TypeError, match="unknown checkpoint_storage type"):
        storage.from_init_arg({"type": "ftp"}, "/unused")


def test_init_arg_of_another_type_raises_type_error() -> None:
    with pytest.raises(TypeError, match="str, a dict or None"):
        storage.from_init_arg(pathlib.Path("/x"), "/unused")  # type: ignore[arg-type]


def test_public_names_are_importable() -> None:
    for name in storage.__all__:
        assert getattr(storage, name) is not None
