"""``Checkpoint``: one checkpoint's record on the master, its files, its metadata."""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import tarfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from determined import errors
from determined.common import storage
from determined.common.api import Session, _routes
from determined.experimental._sdk import _metrics, _paging
from determined.experimental._sdk._enums import (
    CheckpointSortBy,
    CheckpointState,
    DownloadMode,
    OrderBy,
)

logger = logging.getLogger("determined.client")

_REDACTED = "********"
_DOWNLOADABLE = (CheckpointState.COMPLETED, CheckpointState.PARTIALLY_DELETED)


class CheckpointStateError(errors.MasterError):
    """The checkpoint is in a state that does not allow what was asked (0.37's
    ``CheckpointStateException``)."""


class DownloadFailed(errors.MasterError):
    """Neither the storage nor the master could supply the checkpoint's files (AUTO mode)."""


@dataclasses.dataclass
class CheckpointTrainingMetadata:
    """Where a checkpoint came from: its experiment (config), trial, hyperparameters and the
    validation metrics reported at its step (``{"avgMetrics": {...}}``)."""

    experiment_config: dict[str, Any]
    experiment_id: int
    trial_id: int
    hparams: dict[str, Any]
    validation_metrics: dict[str, Any]

    @classmethod
    def _from_json(cls, training: dict[str, Any] | None) -> CheckpointTrainingMetadata | None:
        if not training or not training.get("trialId"):
            return None  # a checkpoint of no trial (0.37: a task's checkpoint)
        return cls(
            experiment_config=dict(training.get("experimentConfig") or {}),
            experiment_id=int(training["experimentId"]),
            trial_id=int(training["trialId"]),
            hparams=dict(training.get("hparams") or {}),
            validation_metrics=dict(training.get("validationMetrics") or {}),
        )


class Checkpoint:
    """A checkpoint: get one from ``client.get_checkpoint(uuid)`` or a trial's or experiment's
    ``list_checkpoints()``.

    Attributes (cached; :meth:`reload` refreshes them):
        uuid: the checkpoint's id in storage.
        task_id, allocation_id: the task and allocation that saved it.
        report_time: when it was reported (RFC 3339).
        resources: ``{path: size in bytes}`` of its files.
        metadata: user metadata (``add_metadata`` changes it on the master).
        state: a :class:`CheckpointState`.
        training: a :class:`CheckpointTrainingMetadata`, or None for a non-trial checkpoint.
    """

    def __init__(self, session: Session, uuid: str) -> None:
        self._session = session
        self.uuid = uuid
        self.task_id: str | None = None
        self.allocation_id: str | None = None
        self.report_time: str | None = None
        self.resources: dict[str, Any] | None = None
        self.metadata: dict[str, Any] | None = None
        self.state: CheckpointState | None = None
        self.training: CheckpointTrainingMetadata | None = None

    def _hydrate(self, body: Mapping[str, Any]) -> None:
        self.task_id = body.get("taskId")
        self.allocation_id = body.get("allocationId")
        self.report_time = body.get("reportTime")
        self.resources = body.get("resources")
        self.metadata = body.get("metadata")
        self.state = CheckpointState(body["state"]) if body.get("state") else None
        self.training = CheckpointTrainingMetadata._from_json(body.get("training"))

    @classmethod
    def _from_json(cls, body: Mapping[str, Any], session: Session) -> Checkpoint:
        ckpt = cls(session, str(body["uuid"]))
        ckpt._hydrate(body)
        return ckpt

    @classmethod
    def _get(cls, session: Session, uuid: str) -> Checkpoint:
        return cls._from_json(_routes.get_checkpoint(session, uuid), session)

    def reload(self) -> None:
        """Read the checkpoint's record again."""
        self._hydrate(_routes.get_checkpoint(self._session, self.uuid))

    def download(self, path: str | None = None, mode: DownloadMode = DownloadMode.AUTO) -> str:
        """Copy the checkpoint's files into ``path`` (default ``checkpoints/<uuid>`` in the
        working directory) and return that path. A directory that already holds a checkpoint
        (a ``metadata.json``) is left as it is, as in 0.37. ``metadata.json`` is written from
        the master's metadata when the files have none.

        Raises:
            CheckpointStateError: the checkpoint is not COMPLETED or PARTIALLY_DELETED.
            DownloadFailed: AUTO mode, and neither the storage nor the master gave the files.
        """
        if self.state is None:
            self.reload()
        if self.state not in _DOWNLOADABLE:
            state = self.state.value if self.state else "unknown"
            raise CheckpointStateError(
                f"checkpoint {self.uuid} is {state}: only COMPLETED or PARTIALLY_DELETED "
                "checkpoints can be downloaded"
            )
        local = pathlib.Path(path) if path is not None else pathlib.Path("checkpoints", self.uuid)
        if not any((local / f).exists() for f in ("metadata.json", "MLmodel")):
            if self.training is None:
                raise NotImplementedError("checkpoints of no trial cannot be downloaded")
            config = self.training.experiment_config.get("checkpoint_storage") or {}
            if mode == DownloadMode.DIRECT:
                self._download_direct(config, local)
            elif mode == DownloadMode.MASTER:
                self._download_via_master(local)
            elif mode == DownloadMode.AUTO:
                self._download_auto(config, local)
            else:
                raise ValueError(f"unknown download mode {mode!r}; use a DownloadMode member")
        if not (local / "metadata.json").exists():
            self.write_metadata_file(str(local / "metadata.json"))
        return str(local)

    def _download_direct(self, config: dict[str, Any], local: pathlib.Path) -> None:
        if not config:
            raise errors.StorageConfigError(
                f"checkpoint {self.uuid}'s experiment config has no checkpoint_storage"
            )
        # The master hides the storage's credentials ("********", docs/security.md): without
        # them the storage client uses this machine's own (AWS_* variables, ~/.aws, gcloud).
        config = {k: (None if v == _REDACTED else v) for k, v in config.items()}
        manager = storage.build(config)
        local.mkdir(parents=True, exist_ok=True)
        manager.download(self.uuid, local)

    def _download_auto(self, config: dict[str, Any], local: pathlib.Path) -> None:
        try:
            self._download_direct(config, local)
            return
        # No access from here: files not where the config says, a cloud extra not installed,
        # credentials the master redacted.
        except (errors.CheckpointNotFound, OSError, ImportError, ValueError, TypeError) as e:
            logger.info("cannot read checkpoint %s directly (%s); via the master", self.uuid, e)
        try:
            self._download_via_master(local)
        except Exception as e:
            raise DownloadFailed(
                f"checkpoint {self.uuid}: the direct download and the download through the "
                f"master both failed (the master's error: {e})"
            ) from e

    def _download_via_master(self, local: pathlib.Path) -> None:
        """0.37's route: ``GET /checkpoints/{uuid}`` answers a gzipped tarball of the files
        (a top directory named by the uuid, as the web UI's download has, is dropped)."""
        local.mkdir(parents=True, exist_ok=True)
        resp = self._session.get(
            f"/checkpoints/{self.uuid}",
            stream=True,
            timeout=3600.0,
            headers={"Accept": "application/gzip"},
        )
        with resp, tarfile.open(fileobj=resp.raw, mode="r|*") as tar:
            for member in tar:
                rel = pathlib.PurePosixPath(member.name)
                parts = rel.parts[1:] if rel.parts and rel.parts[0] == self.uuid else rel.parts
                if not parts or not (member.isfile() or member.isdir()):
                    continue
                if any(p in ("..", "") for p in parts) or rel.is_absolute():
                    raise DownloadFailed(f"checkpoint {self.uuid}: unsafe path {member.name!r}")
                target = local.joinpath(*parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None  # a regular file always has contents
                with src, open(target, "wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)

    def write_metadata_file(self, path: str) -> None:
        """Write the checkpoint's metadata (as the master has it) to ``path`` as JSON."""
        with open(path, "w") as f:
            json.dump(self.metadata, f, indent=2)

    def _post_metadata(self, metadata: dict[str, Any]) -> None:
        _routes.post_checkpoint_metadata(self._session, self.uuid, metadata)
        self.metadata = metadata

    def add_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the checkpoint's metadata on the master (top-level keys
        replace). The copy in the checkpoint storage is not changed."""
        self._post_metadata({**(self.metadata or {}), **metadata})

    def remove_metadata(self, keys: list[str]) -> None:
        """Remove these top-level keys from the checkpoint's metadata on the master."""
        self._post_metadata({k: v for k, v in (self.metadata or {}).items() if k not in keys})

    def delete(self) -> None:
        """Delete the checkpoint's files from storage and mark it DELETED."""
        _routes.delete_checkpoints(self._session, [self.uuid])
        logger.info("deletion of checkpoint %s requested", self.uuid)

    def remove_files(self, globs: list[str]) -> None:
        """Delete the checkpoint's files that match any of ``globs`` (0.37's
        ``POST /api/v1/checkpoints/rm``); an empty list only refreshes its resources."""
        _routes.remove_checkpoint_files(self._session, [self.uuid], globs)

    def get_metrics(self, group: str | None = None) -> Iterator[_metrics.TrialMetrics]:
        """Metrics reported by tasks that used this checkpoint (0.37: inference metrics, via
        ``GET /api/v1/checkpoints/{uuid}/metrics``)."""
        for report in _routes.get_checkpoint_metrics(self._session, self.uuid, group):
            yield _metrics.TrialMetrics._from_json(report, group)

    def get_pachyderm_commit(self) -> str:
        """The Pachyderm commit in the experiment config's ``integrations.pachyderm.dataset``.

        Raises:
            ValueError: the config names none.
        """
        if self.training is None:
            self.reload()
        config = self.training.experiment_config if self.training else {}
        try:
            return str(config["integrations"]["pachyderm"]["dataset"]["commit"])
        except (KeyError, TypeError):
            raise ValueError(
                f"checkpoint {self.uuid}'s experiment config has no "
                "integrations.pachyderm.dataset.commit"
            ) from None

    def __repr__(self) -> str:
        if self.training is not None:
            return (
                f"Checkpoint(uuid={self.uuid}, task_id={self.task_id}, "
                f"trial_id={self.training.trial_id})"
            )
        return f"Checkpoint(uuid={self.uuid}, task_id={self.task_id})"


def list_checkpoints(
    session: Session,
    get_page: Callable[[dict[str, Any]], dict[str, Any]],
    sort_by: str | CheckpointSortBy | None,
    order_by: OrderBy | None,
    max_results: int | None,
) -> list[Checkpoint]:
    """COMPLETED checkpoints of a trial or an experiment (``get_page(query)``: one page of its
    listing), as 0.37's ``list_checkpoints`` of both asks for them."""
    if (sort_by is None) != (order_by is None):
        raise ValueError("set sort_by and order_by together, or neither")
    if sort_by is not None and not isinstance(sort_by, (str, CheckpointSortBy)):
        raise ValueError(f"sort_by must be a CheckpointSortBy or a metric name, not {sort_by!r}")
    params: dict[str, Any] = {"states": ["STATE_COMPLETED"]}
    if isinstance(sort_by, str):
        params["sortByMetric"] = sort_by
    else:
        params["sortByAttr"] = (sort_by or CheckpointSortBy.SEARCHER_METRIC).value
    if order_by is not None:
        params["orderBy"] = order_by.value
    if max_results:
        params["limit"] = max_results

    def page(offset: int) -> dict[str, Any]:
        return get_page({**params, "offset": offset})

    found = _paging.read_paginated(page, "checkpoints", single=bool(max_results))
    return [Checkpoint._from_json(c, session) for c in found]
