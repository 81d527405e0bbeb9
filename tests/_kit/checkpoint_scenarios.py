"""Rank programs for tests/core/test_checkpoint_shard.py, run in real processes by
``_kit.dist_worker.run``. Each builds a DistributedContext and a CheckpointContext over the storage
config in ``arg["storage"]`` (shared_fs base path, or an s3 section for moto's server) that
reports to the recording master at ``arg["master"]`` (or only logs when that is None), then
returns what the test checks."""

from __future__ import annotations

import os
import pathlib
from typing import Any

from determined.common import storage
from determined.common.api import Session
from determined.common.storage import MANIFEST_NAME
from determined.core._checkpoint import (
    CheckpointContext,
    ClusterCheckpointReporter,
    DownloadMode,
    LocalCheckpointReporter,
)
from determined.core._distributed import DistributedContext


def _warm_s3_client() -> None:
    """Import boto3 and load its S3 model into the default session once, here: the forkserver
    (``_kit.dist_worker``) imports this module before it forks the ranks, which then create
    their clients in milliseconds instead of ~0.3 s of CPU each."""
    try:
        import boto3
    except ImportError:  # without the s3 extra there is nothing to warm
        return
    boto3.client("s3", region_name="us-east-1", aws_access_key_id="-", aws_secret_access_key="-")


_warm_s3_client()


def _checkpoint(d: DistributedContext, arg: dict[str, Any]) -> CheckpointContext:
    cfg = arg["storage"]
    sm = storage.build(cfg) if isinstance(cfg, dict) else storage.SharedFSStorageManager(cfg)
    if arg.get("master") is None:
        return CheckpointContext(d, sm, LocalCheckpointReporter())
    reporter = ClusterCheckpointReporter(Session(arg["master"], "tok", max_attempts=1), "t", "a", 1)
    return CheckpointContext(d, sm, reporter)


def _write(path: pathlib.Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)


def _upload_inputs(d: DistributedContext, case: str, tmp: pathlib.Path) -> tuple[Any, ...]:
    """(ckpt_dir, metadata, selector) for one rank in one upload case."""
    r = d.get_rank()
    mine = tmp / f"rank{r}"
    meta: dict[str, Any] = {"steps_completed": 3, "per_rank": {str(r): r}}
    files = {f"r{r}.bin": bytes([r]) * 10, "common/": b""}
    if case == "identical_dup":
        files["shared.bin"] = b"same everywhere"
    elif case == "different_dup":
        files["shared.bin"] = f"rank {r}".encode()
    elif case == "metadata_conflict":
        meta["a"] = {"b": r}
    files = {k: v for k, v in files.items() if not k.endswith("/")}
    if case in ("shared_dir", "selector"):
        mine = tmp / f"node{d.get_cross_rank()}"
    _write(mine, files)
    (mine / "common").mkdir(exist_ok=True)
    d.allgather(None)  # every rank's files exist before anyone lists a shared directory
    selector = None
    if case == "selector":
        selector = lambda p: p == f"r{r}.bin"  # noqa: E731
    if case == "none_for_odd" and r % 2 == 1:
        return None, meta, None
    if case == "all_none":
        return None, meta, None
    return mine, meta, selector


def sharded_upload(kw: dict[str, Any], arg: dict[str, Any]) -> Any:
    with DistributedContext(**kw) as d:
        ckpt = _checkpoint(d, arg)
        ckpt_dir, meta, selector = _upload_inputs(d, arg["case"], pathlib.Path(arg["tmp"]))
        return ckpt.upload(ckpt_dir, meta, shard=True, selector=selector)


def sharded_store_path(kw: dict[str, Any], arg: dict[str, Any]) -> Any:
    with DistributedContext(**kw) as d:
        ckpt = _checkpoint(d, arg)
        r = d.get_rank()
        meta: dict[str, Any] = {"steps_completed": 3, "per_rank": {str(r): r}}
        if arg.get("conflict"):
            meta["lr"] = r
        with ckpt.store_path(meta, shard=True) as (path, sid):
            if arg.get("conflict"):
                return "entered the body"
            (path / f"r{r}.bin").write_bytes(bytes([r]) * 10)
            if arg.get("fail_rank") == r:
                raise ValueError(f"rank {r} failed while writing")
        return sid, str(path), path.exists()


def non_chief_single(kw: dict[str, Any], arg: dict[str, Any]) -> Any:
    with DistributedContext(**kw) as d:
        ckpt = _checkpoint(d, arg)
        if d.get_rank() == 0:
            return "chief"
        errors = []
        try:
            ckpt.upload(arg["tmp"], {"steps_completed": 1})
        except RuntimeError as e:
            errors.append(str(e))
        try:
            with ckpt.store_path({"steps_completed": 1}):
                pass
        except RuntimeError as e:
            errors.append(str(e))
        return errors


def shared_restore(kw: dict[str, Any], arg: dict[str, Any]) -> Any:
    """restore_path in the default mode, each rank selecting per ``arg["select"]``."""
    with DistributedContext(**kw) as d:
        ckpt = _checkpoint(d, arg)
        r = d.get_rank()
        selector = None
        if arg.get("select"):
            selector = lambda p: p in (f"r{r}.bin", "metadata.json")  # noqa: E731
        try:
            with ckpt.restore_path(arg["sid"], selector=selector) as path:
                names = sorted(
                    str(p.relative_to(path))
                    for p in path.rglob("*")
                    if p.is_file() and p.name != MANIFEST_NAME
                )
                d.allgather(None)  # everyone looks before anyone leaves
            return str(path), names, path.exists()
        except Exception as e:
            return f"{type(e).__name__}: {e}"


def shared_download(kw: dict[str, Any], arg: dict[str, Any]) -> Any:
    with DistributedContext(**kw) as d:
        ckpt = _checkpoint(d, arg)
        dst = pathlib.Path(arg["tmp"]) / f"dl-node{d.get_cross_rank()}"
        mode = DownloadMode(arg.get("mode", "LOCAL_WORKERS_SHARE_DOWNLOAD"))
        if mode == DownloadMode.NoSharedDownload:
            dst = dst / f"rank{d.get_rank()}"
        try:
            ckpt.download(arg["sid"], dst, mode)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        d.allgather(None)
        return sorted(os.listdir(dst)) if dst.exists() else None
