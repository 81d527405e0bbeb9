"""checkpoint_storage: every type, GC defaults, the merge over the master's default."""

from __future__ import annotations

import pytest

from determined.common.expconf import (
    InvalidExperimentConfig,
    S3Config,
    SharedFSConfig,
    parse_experiment_config,
)

BASE = {"entrypoint": "a:B", "searcher": {"name": "single", "metric": "m", "max_length": 1}}
GC = {"save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 1}


def storage_json(section: object, default: dict | None = None) -> dict:
    config = parse_experiment_config(
        {**BASE, "checkpoint_storage": section}, default_checkpoint_storage=default
    )
    return config.to_json_dict()["checkpoint_storage"]


OTHER = {"type": "gcs", "bucket": "master-default"}


def storage_problems(section: object) -> dict[str, str]:
    with pytest.raises(InvalidExperimentConfig) as info:
        parse_experiment_config(
            {**BASE, "checkpoint_storage": section}, default_checkpoint_storage=OTHER
        )
    return dict(info.value.problems)


def test_default_is_shared_fs_under_det_home(tmp_path: object) -> None:
    out = storage_json(None)
    assert out == {
        "type": "shared_fs",
        "host_path": f"{tmp_path}/det_home/checkpoints",
        "storage_path": None,
        "propagation": "rprivate",
        **GC,
    }


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            {"type": "shared_fs", "host_path": "/mnt", "checkpoint_path": "ckpt"},
            {"host_path": "/mnt", "storage_path": None, "propagation": "rprivate",
             "checkpoint_path": "ckpt"},
        ),
        (
            {"type": "shared_fs", "host_path": "/mnt", "storage_path": "/mnt/a/b"},
            {"host_path": "/mnt", "storage_path": "/mnt/a/b", "propagation": "rprivate"},
        ),
        ({"type": "directory", "container_path": "/ckpts"}, {"container_path": "/ckpts"}),
        (
            {"type": "s3", "bucket": "b"},
            {"bucket": "b", "access_key": None, "secret_key": None, "endpoint_url": None,
             "prefix": None},
        ),
        ({"type": "gcs", "bucket": "b", "prefix": "p/q"}, {"bucket": "b", "prefix": "p/q"}),
        (
            {"type": "azure", "container": "c", "account_url": "https://x", "credential": "k"},
            {"container": "c", "account_url": "https://x", "credential": "k"},
        ),
        ({"type": "azure", "container": "c", "connection_string": "cs"},
         {"container": "c", "connection_string": "cs"}),
    ],
)  # fmt: skip
def test_each_type_with_gc_defaults(section: dict, expected: dict) -> None:
    assert storage_json(section) == {"type": section["type"], **expected, **GC}


def test_gc_only_section_merges_with_master_default() -> None:
    default = {"type": "s3", "bucket": "master-bucket", "save_trial_latest": 3}
    out = storage_json({"save_trial_best": 5}, default)
    assert out["type"] == "s3" and out["bucket"] == "master-bucket"
    assert (out["save_trial_best"], out["save_trial_latest"]) == (5, 3)


def test_same_type_fills_missing_fields_and_other_type_replaces() -> None:
    default = {"type": "s3", "bucket": "mb", "endpoint_url": "http://m"}
    assert storage_json({"type": "s3", "prefix": "p"}, default)["endpoint_url"] == "http://m"
    out = storage_json({"type": "gcs", "bucket": "g"}, default)
    assert out == {"type": "gcs", "bucket": "g", "prefix": None, **GC}


def test_typed_access() -> None:
    config = parse_experiment_config(
        {**BASE, "checkpoint_storage": {"type": "s3", "bucket": "b", "save_trial_best": 2}}
    )
    assert isinstance(config.checkpoint_storage, S3Config)
    assert config.checkpoint_storage.save_trial_best == 2
    local = parse_experiment_config(BASE).checkpoint_storage
    assert isinstance(local, SharedFSConfig)


CS = "checkpoint_storage"
AZ = {"type": "azure", "container": "c"}


@pytest.mark.parametrize(
    ("section", "path", "fragment"),
    [
        ({"type": "hdfs"}, f"{CS}.type", "unknown storage type 'hdfs'"),
        ("s3", CS, "must be a mapping"),
        ({"type": "shared_fs"}, f"{CS}.host_path", "is required"),
        ({"type": "shared_fs", "host_path": "rel"}, CS, "absolute"),
        ({"type": "shared_fs", "host_path": "/a", "storage_path": "/b"}, CS, "subdirectory"),
        # Relative ones too, and the legacy checkpoint_path (issue 38 item 7): both paths named.
        ({"type": "shared_fs", "host_path": "/a", "storage_path": "x/../../b"}, CS,
         "storage_path='x/../../b' leads out of host_path='/a'"),
        ({"type": "shared_fs", "host_path": "/a/", "checkpoint_path": ".."}, CS,
         "checkpoint_path='..' leads out of host_path='/a/'"),
        ({"type": "directory"}, f"{CS}.container_path", "is required"),
        ({"type": "s3"}, f"{CS}.bucket", "is required"),
        ({"type": "s3", "bucket": "b", "prefix": "a/../b"}, CS, "'..'"),
        ({"type": "gcs", "bucket": "b", "prefix": ".."}, CS, "'..'"),
        ({"type": "gcs", "bucket": "b", "host_path": "/x"}, f"{CS}.host_path", "unknown key"),
        ({"type": "azure", "container": "c"}, CS, "exactly one of"),
        ({**AZ, "connection_string": "a", "account_url": "b"}, CS, "exactly one of"),
        ({**AZ, "connection_string": "a", "credential": "k"}, CS, "must not both"),
        ({"type": "s3", "bucket": "b", "save_trial_best": -1}, f"{CS}.save_trial_best", "greater"),
    ],
)  # fmt: skip
def test_errors(section: object, path: str, fragment: str) -> None:
    found = storage_problems(section)
    assert path in found, found
    assert fragment in found[path], found[path]
