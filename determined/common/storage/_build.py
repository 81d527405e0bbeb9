"""Storage managers from configuration: a ``checkpoint_storage`` section (``build``) or the
``checkpoint_storage=`` argument of ``core.init()`` (``from_init_arg``)."""

from __future__ import annotations

import os
import posixpath
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from determined import errors
from determined.common.storage._azure import AzureStorageManager
from determined.common.storage._base import StorageManager
from determined.common.storage._directory import DirectoryStorageManager, SharedFSStorageManager
from determined.common.storage._gcs import GCSStorageManager
from determined.common.storage._s3 import S3StorageManager

# Keys every type may carry: the type itself and the master's checkpoint GC policy.
_COMMON_KEYS = {"type", "save_experiment_best", "save_trial_best", "save_trial_latest"}
_KEYS = {
    "shared_fs": {
        "host_path",
        "storage_path",
        "container_path",
        "propagation",
        "checkpoint_path",
        "tensorboard_path",
    },
    "directory": {"container_path", "tensorboard_path"},
    "s3": {"bucket", "access_key", "secret_key", "endpoint_url", "prefix"},
    "gcs": {"bucket", "prefix"},
    "azure": {"container", "connection_string", "account_url", "credential"},
}


def _check_keys(kind: str, config: Mapping[str, Any], required: tuple[str, ...]) -> None:
    extra = sorted(set(config) - _KEYS[kind] - _COMMON_KEYS)
    if extra:
        raise errors.StorageConfigError(
            f"checkpoint_storage of type {kind} does not take {extra}; "
            f"its keys are {sorted(_KEYS[kind])}"
        )
    missing = [k for k in required if not config.get(k)]
    if missing:
        raise errors.StorageConfigError(
            f"checkpoint_storage of type {kind} needs {missing}; add them to the config"
        )


def shared_fs_base(host_path: str, storage_path: str | None, container_path: str | None) -> str:
    """The base directory of a shared_fs config: ``storage_path`` (relative, or absolute inside
    ``host_path``) under ``host_path``, or under ``container_path`` where the host path is
    mounted (on a cluster)."""
    if not os.path.isabs(host_path):
        raise errors.StorageConfigError(f"host_path must be an absolute path, not {host_path!r}")
    mount = container_path if container_path is not None else host_path
    if storage_path is None:
        return mount
    full = posixpath.normpath(posixpath.join(host_path, storage_path))
    rel = posixpath.relpath(full, posixpath.normpath(host_path))
    if rel == ".." or rel.startswith("../"):
        raise errors.StorageConfigError(
            f"storage_path {storage_path!r} must be a relative path or lie under host_path "
            f"{host_path!r}"
        )
    return posixpath.normpath(posixpath.join(mount, rel))


def _shared_fs(config: Mapping[str, Any], container_path: str | None) -> StorageManager:
    _check_keys("shared_fs", config, ("host_path",))
    # `checkpoint_path` is the pre-0.13 name of storage_path.
    storage_path = config.get("storage_path") or config.get("checkpoint_path")
    return SharedFSStorageManager(shared_fs_base(config["host_path"], storage_path, container_path))


def _directory(config: Mapping[str, Any], container_path: str | None) -> StorageManager:
    _check_keys("directory", config, ("container_path",))
    return DirectoryStorageManager(config["container_path"])


def _s3(config: Mapping[str, Any], container_path: str | None) -> StorageManager:
    _check_keys("s3", config, ("bucket",))
    prefix = config.get("prefix")
    if prefix is not None and ".." in prefix.split("/"):
        raise errors.StorageConfigError(f"s3 prefix must not contain '..' (got {prefix!r})")
    return S3StorageManager(
        bucket=config["bucket"],
        access_key=config.get("access_key"),
        secret_key=config.get("secret_key"),
        endpoint_url=config.get("endpoint_url"),
        prefix=prefix,
    )


def _gcs(config: Mapping[str, Any], container_path: str | None) -> StorageManager:
    _check_keys("gcs", config, ("bucket",))
    prefix = config.get("prefix")
    if prefix is not None and ".." in prefix.split("/"):
        raise errors.StorageConfigError(f"gcs prefix must not contain '..' (got {prefix!r})")
    return GCSStorageManager(bucket=config["bucket"], prefix=prefix)


def _azure(config: Mapping[str, Any], container_path: str | None) -> StorageManager:
    _check_keys("azure", config, ("container",))
    if not config.get("connection_string") and not config.get("account_url"):
        raise errors.StorageConfigError(
            "checkpoint_storage of type azure needs connection_string or account_url (with "
            "credential unless the URL carries a SAS token)"
        )
    if ".." in config["container"].split("/"):
        raise errors.StorageConfigError(
            f"azure container must not contain '..' (got {config['container']!r})"
        )
    return AzureStorageManager(
        container=config["container"],
        connection_string=config.get("connection_string"),
        account_url=config.get("account_url"),
        credential=config.get("credential"),
    )


_BUILDERS: dict[str, Callable[[Mapping[str, Any], str | None], StorageManager]] = {
    "shared_fs": _shared_fs,
    "directory": _directory,
    "s3": _s3,
    "gcs": _gcs,
    "azure": _azure,
}


def build(config: Mapping[str, Any], container_path: str | None = None) -> StorageManager:
    """A StorageManager for a ``checkpoint_storage`` section (types shared_fs, directory, s3,
    gcs, azure; the GC keys ``save_*`` are accepted and ignored).

    Args:
        config: the section, as in an experiment config.
        container_path: where shared_fs's ``host_path`` is mounted for this process, if not at
            ``host_path`` itself (the reference mounts it at ``/determined_shared_fs``).

    Raises:
        ValueError: no ``type``, or one that is not a string (as in the reference).
        TypeError: an unknown ``type`` string (as in the reference).
        determined.errors.StorageConfigError: a missing or unknown key, a bad path (a
            ValueError, as the reference's errors for a bad azure section are).
        ImportError: s3/gcs/azure without their extra installed.
    """
    kind = config.get("type")
    if kind is None or not isinstance(kind, str):
        what = "has no 'type'" if kind is None else f"has type {kind!r}, which is not a string"
        raise ValueError(f"checkpoint_storage {what}; set type to one of {sorted(_BUILDERS)}")
    builder = _BUILDERS.get(kind)
    if builder is None:
        raise TypeError(f"unknown checkpoint_storage type {kind!r}; use one of {sorted(_BUILDERS)}")
    return builder(config, container_path)


def from_string(shortcut: str) -> StorageManager:
    """``core.init(checkpoint_storage="...")``: a path or ``file:`` URL (shared_fs there; ""
    is the working directory), ``s3://bucket/prefix`` or ``gs://bucket/prefix``.

    Raises ValueError for a ``file:`` URL with a host, a cloud URL without a bucket, any
    other scheme, or a string with ``;params``, ``?query`` or ``#fragment`` (as the reference
    does: such a path would otherwise be cut short there)."""
    parsed = urllib.parse.urlparse(shortcut)
    if parsed.params or parsed.query or parsed.fragment:
        cut = next(c for c in ";?#" if c in shortcut)
        raise ValueError(
            f"checkpoint_storage {shortcut!r} has {cut!r} in it, which a storage URL does not "
            "take; give a path without ';', '?' or '#' (or a dict: {'type': 'shared_fs', ...})"
        )
    if parsed.scheme in ("", "file"):
        if parsed.netloc:
            raise ValueError(
                f"checkpoint_storage {shortcut!r} names a host ({parsed.netloc!r}); a file: URL "
                "must be local, like file:///abs/path or a plain path"
            )
        return SharedFSStorageManager(parsed.path or os.getcwd())
    if parsed.scheme in ("s3", "gs"):
        if not parsed.netloc:
            raise ValueError(
                f"checkpoint_storage {shortcut!r} has no bucket; use {parsed.scheme}://b/p"
            )
        prefix = parsed.path.strip("/") or None
        if parsed.scheme == "s3":
            return S3StorageManager(bucket=parsed.netloc, prefix=prefix)
        return GCSStorageManager(bucket=parsed.netloc, prefix=prefix)
    raise ValueError(
        f"checkpoint_storage {shortcut!r} has an unsupported scheme {parsed.scheme!r}; use a path, "
        "file://, s3:// or gs://"
    )


def from_init_arg(
    arg: str | Mapping[str, Any] | None, default_base: str | os.PathLike[str]
) -> StorageManager:
    """The storage of a local ``core.init(checkpoint_storage=arg)``.

    None gives shared_fs at ``default_base``; a str goes through :func:`from_string`; a dict
    through :func:`build`, except that ``type: shared_fs`` raises ValueError (as in the
    reference: give a path string instead). Anything else raises TypeError."""
    if arg is None:
        return SharedFSStorageManager(default_base)
    if isinstance(arg, str):
        return from_string(arg)
    if isinstance(arg, Mapping):
        if arg.get("type") == "shared_fs":
            raise ValueError(
                "core.init(checkpoint_storage=...) does not take a shared_fs dict; pass the "
                "directory as a string instead, e.g. checkpoint_storage='/path/to/checkpoints'"
            )
        return build(arg)
    raise TypeError(f"checkpoint_storage must be a str, a dict or None, not {type(arg).__name__}")
