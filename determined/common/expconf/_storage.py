"""The ``checkpoint_storage`` section: one model per storage ``type``, the shared GC policy
fields, and the merge of a user's section over the master's default storage."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any, Literal, Union

from pydantic import Field, model_validator

from determined.common import _paths
from determined.common.expconf._base import Problems, Section, validate


def _omit_none(value: Any) -> bool:
    return value is None


class _StorageBase(Section):
    # checkpoint GC at experiment end (docs/reference/master.md §4.7)
    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)


class SharedFSConfig(_StorageBase):
    """``type: shared_fs``: checkpoints under ``host_path`` (+ ``storage_path``). The legacy
    ``checkpoint_path`` key is kept as given; the harness reads it as ``storage_path``."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: str
    storage_path: str | None = None
    propagation: str = "rprivate"
    container_path: str | None = Field(default=None, exclude_if=_omit_none)
    checkpoint_path: str | None = Field(default=None, exclude_if=_omit_none)
    tensorboard_path: str | None = Field(default=None, exclude_if=_omit_none)

    @model_validator(mode="after")
    def _paths(self) -> SharedFSConfig:
        if not self.host_path.startswith("/"):
            raise ValueError(f"host_path must be an absolute path (got {self.host_path!r})")
        # Relative ones too ("../elsewhere"): the harness would refuse them only when the
        # trial starts (storage.shared_fs_base), after the experiment was created.
        for key, sp in (
            ("storage_path", self.storage_path),
            ("checkpoint_path", self.checkpoint_path),
        ):
            if sp is None:
                continue
            base = posixpath.normpath(self.host_path)
            rel = posixpath.relpath(posixpath.normpath(posixpath.join(base, sp)), base)
            if rel == ".." or rel.startswith("../"):
                raise ValueError(
                    f"{key} must either be a relative directory or a subdirectory of "
                    f"host_path: {key}={sp!r} leads out of host_path={self.host_path!r}"
                )
        return self


class DirectoryConfig(_StorageBase):
    """``type: directory``: checkpoints directly under ``container_path``."""

    type: Literal["directory"] = "directory"
    container_path: str


def _check_prefix(prefix: str | None) -> None:
    if prefix is not None:
        parts = prefix.split("/")
        if ".." in parts:
            raise ValueError(f"prefix must not contain '..' (got {prefix!r})")


class S3Config(_StorageBase):
    """``type: s3``: a bucket; credentials from the keys or boto3's usual sources."""

    type: Literal["s3"] = "s3"
    bucket: str
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None
    prefix: str | None = None

    @model_validator(mode="after")
    def _prefix_ok(self) -> S3Config:
        _check_prefix(self.prefix)
        return self


class GCSConfig(_StorageBase):
    """``type: gcs``: a Google Cloud Storage bucket."""

    type: Literal["gcs"] = "gcs"
    bucket: str
    prefix: str | None = None

    @model_validator(mode="after")
    def _prefix_ok(self) -> GCSConfig:
        _check_prefix(self.prefix)
        return self


class AzureConfig(_StorageBase):
    """``type: azure``: a blob container, with exactly one of ``connection_string`` or
    ``account_url`` (``credential`` only with ``account_url``)."""

    type: Literal["azure"] = "azure"
    container: str
    connection_string: str | None = Field(default=None, exclude_if=_omit_none)
    account_url: str | None = Field(default=None, exclude_if=_omit_none)
    credential: str | None = Field(default=None, exclude_if=_omit_none)

    @model_validator(mode="after")
    def _one_source(self) -> AzureConfig:
        if (self.connection_string is None) == (self.account_url is None):
            raise ValueError("exactly one of connection_string or account_url must be set")
        if self.connection_string is not None and self.credential is not None:
            raise ValueError("credential and connection_string must not both be set")
        return self


CheckpointStorageConfig = Union[SharedFSConfig, DirectoryConfig, S3Config, GCSConfig, AzureConfig]

STORAGES: dict[str, type[Section]] = {
    "shared_fs": SharedFSConfig,
    "directory": DirectoryConfig,
    "s3": S3Config,
    "gcs": GCSConfig,
    "azure": AzureConfig,
}


def merge_storage(user: Any, default: Mapping[str, Any] | None) -> Any:
    """The user's section over the master's default, as the reference merges them: a section
    without ``type`` (only GC fields, say) or with the default's type takes the default's other
    fields; a different type replaces the default entirely."""
    if default is None or (user is not None and not isinstance(user, Mapping)):
        return user
    if user is None:
        return dict(default)
    if "type" in user and user["type"] != default.get("type"):
        return dict(user)
    return {**default, **user}


def parse_storage(raw: Any, problems: Problems) -> CheckpointStorageConfig | None:
    """The model for a (merged) ``checkpoint_storage`` section, dispatched on ``type``."""
    if not isinstance(raw, Mapping):
        problems.append(("checkpoint_storage", f"must be a mapping (got {raw!r})"))
        return None
    kind = raw.get("type")
    model = STORAGES.get(kind) if isinstance(kind, str) else None
    if model is None:
        kinds = ", ".join(STORAGES)
        what = "is required" if kind is None else f"unknown storage type {kind!r}"
        problems.append(("checkpoint_storage.type", f"{what}; use one of {kinds}"))
        return None
    return validate(model, dict(raw), "checkpoint_storage", problems)  # type: ignore[return-value]


def default_storage() -> dict[str, Any]:
    """The storage used when neither the config nor the master names one: shared_fs at the
    data dir's ``checkpoints`` folder ($DET_HOME), GC 0/1/1 (as ``det deploy local``)."""
    return {"type": "shared_fs", "host_path": os.path.abspath(_paths.default_checkpoint_dir())}
