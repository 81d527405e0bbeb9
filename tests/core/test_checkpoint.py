"""CheckpointContext on one process: docs/reference/harness.md §19 items 14-18, 21, 22, the
atomic-commit guarantees and the deliberate deviations, over shared_fs and s3 (moto's real
server on 127.0.0.1)."""

from __future__ import annotations

import json
import logging
import pathlib
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.recording_master import RecordingMaster

from determined import errors
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


def single() -> DistributedContext:
    return DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(params=["shared_fs", "s3"])
def sm(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> storage.StorageManager:
    if request.param == "shared_fs":
        return storage.SharedFSStorageManager(tmp_path / "base")
    import boto3

    endpoint = request.getfixturevalue("moto_endpoint")
    request.getfixturevalue("monkeypatch").setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = "b-" + uuid.uuid4().hex[:12]
    keys = {"aws_access_key_id": "k", "aws_secret_access_key": "s"}
    boto3.client("s3", endpoint_url=endpoint, **keys).create_bucket(Bucket=bucket)
    return storage.S3StorageManager(
        bucket, access_key="k", secret_key="s", endpoint_url=endpoint, prefix="p"
    )


@pytest.fixture
def ctx(sm: storage.StorageManager) -> CheckpointContext:
    return CheckpointContext(single(), sm, LocalCheckpointReporter())


def contents(ctx: CheckpointContext, sid: str, tmp: pathlib.Path) -> dict[str, bytes]:
    dst = tmp / ("dl-" + uuid.uuid4().hex[:6])
    ctx.download(sid, dst)
    return {str(p.relative_to(dst)): p.read_bytes() for p in dst.rglob("*") if p.is_file()}


def user_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    src = tmp_path / "user"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "w.bin").write_bytes(b"weights")
    (src / "top.txt").write_bytes(b"top")
    return src


# --- upload ------------------------------------------------------------------------------------


def test_upload_without_a_dir_raises(ctx: CheckpointContext) -> None:  # §19 item 14
    with pytest.raises(RuntimeError, match="ckpt_dir=None"):
        ctx.upload(None)


def test_upload_lands_at_base_uuid_with_metadata(tmp_path: pathlib.Path) -> None:  # item 15
    base = tmp_path / "base"
    ctx = CheckpointContext(
        single(), storage.SharedFSStorageManager(base), LocalCheckpointReporter()
    )
    sid = ctx.upload(user_dir(tmp_path), {"steps_completed": 5})
    assert uuid.UUID(sid)
    assert sorted(p.name for p in base.iterdir()) == [sid]
    assert json.loads((base / sid / "metadata.json").read_text()) == {"steps_completed": 5}
    assert (base / sid / "sub" / "w.bin").read_bytes() == b"weights"
    assert (base / sid / MANIFEST_NAME).exists()


def test_upload_round_trip(ctx: CheckpointContext, tmp_path: pathlib.Path) -> None:
    sid = ctx.upload(user_dir(tmp_path), {"a": [1, 2]})
    assert contents(ctx, sid, tmp_path) == {
        "metadata.json": b'{\n  "a": [\n    1,\n    2\n  ]\n}',
        "sub/w.bin": b"weights",
        "top.txt": b"top",
    }


def test_selector_sees_relative_paths_and_filters(  # item 16
    ctx: CheckpointContext, tmp_path: pathlib.Path
) -> None:
    seen: list[str] = []

    def selector(path: str) -> bool:
        seen.append(path)
        return path.startswith("sub")

    sid = ctx.upload(user_dir(tmp_path), selector=selector)
    assert sorted(seen) == ["sub/", "sub/w.bin", "top.txt"]
    assert set(contents(ctx, sid, tmp_path)) == {"sub/w.bin", "metadata.json"}


def test_q8_upload_leaves_the_users_dir_alone(
    ctx: CheckpointContext, tmp_path: pathlib.Path
) -> None:
    """Deviation (Q8): metadata.json goes into the checkpoint, not into ``ckpt_dir``, and a
    selector cannot leave it out."""
    src = user_dir(tmp_path)
    sid = ctx.upload(src, {"k": 1}, selector=lambda p: p == "top.txt")
    assert sorted(p.name for p in src.iterdir()) == ["sub", "top.txt"]
    assert contents(ctx, sid, tmp_path)["metadata.json"] == b'{\n  "k": 1\n}'


def test_unserializable_metadata_raises_before_writing(tmp_path: pathlib.Path) -> None:
    base = tmp_path / "base"
    ctx = CheckpointContext(
        single(), storage.SharedFSStorageManager(base), LocalCheckpointReporter()
    )
    with pytest.raises(TypeError, match="JSON-serializable"):
        ctx.upload(user_dir(tmp_path), {"x": object()})
    assert not base.exists() or list(base.iterdir()) == []


# --- store_path --------------------------------------------------------------------------------


def test_store_path_commits_with_metadata(tmp_path: pathlib.Path) -> None:  # item 17
    """Deviation: the yielded path is the staging directory ``<base>/.<uuid>.tmp``; on exit
    the checkpoint is renamed to ``<base>/<uuid>``."""
    base = tmp_path / "base"
    ctx = CheckpointContext(
        single(), storage.SharedFSStorageManager(base), LocalCheckpointReporter()
    )
    with ctx.store_path({"steps_completed": 1}) as (path, sid):
        assert path == base / f".{sid}.tmp"
        (path / "model.pt").write_bytes(b"m")
    assert sorted(p.name for p in base.iterdir()) == [sid]
    assert json.loads((base / sid / "metadata.json").read_text()) == {"steps_completed": 1}
    assert (base / sid / "model.pt").read_bytes() == b"m"


def test_store_path_round_trip(ctx: CheckpointContext, tmp_path: pathlib.Path) -> None:
    with ctx.store_path() as (path, sid):
        (path / "d").mkdir()
        (path / "d" / "x").write_bytes(b"x")
    assert contents(ctx, sid, tmp_path) == {"d/x": b"x", "metadata.json": b"{}"}
    with ctx.restore_path(sid) as restored:
        assert (restored / "d" / "x").read_bytes() == b"x"


# --- reading, deleting -------------------------------------------------------------------------


def test_restore_path_on_shared_fs_is_in_place(tmp_path: pathlib.Path) -> None:  # item 21
    base = tmp_path / "base"
    ctx = CheckpointContext(
        single(), storage.SharedFSStorageManager(base), LocalCheckpointReporter()
    )
    sid = ctx.upload(user_dir(tmp_path))
    for mode in DownloadMode:
        with ctx.restore_path(sid, mode) as path:
            assert path == base / sid


@pytest.mark.parametrize("mode", list(DownloadMode))
def test_missing_id_raises_not_found(  # item 21
    ctx: CheckpointContext, tmp_path: pathlib.Path, mode: DownloadMode
) -> None:
    sid = str(uuid.uuid4())
    with pytest.raises(errors.CheckpointNotFound), ctx.restore_path(sid, mode):
        pass
    with pytest.raises(errors.CheckpointNotFound):
        ctx.download(sid, tmp_path / "x", mode)


def test_download_mode_values_and_strings(ctx: CheckpointContext, tmp_path: pathlib.Path) -> None:
    assert DownloadMode.LocalWorkersShareDownload.value == "LOCAL_WORKERS_SHARE_DOWNLOAD"
    assert DownloadMode.NoSharedDownload.value == "NO_SHARED_DOWNLOAD"
    sid = ctx.upload(user_dir(tmp_path))
    ctx.download(sid, tmp_path / "dl", "NO_SHARED_DOWNLOAD")  # type: ignore[arg-type]
    assert (tmp_path / "dl" / "top.txt").exists()


def test_download_and_restore_selectors(ctx: CheckpointContext, tmp_path: pathlib.Path) -> None:
    sid = ctx.upload(user_dir(tmp_path))
    ctx.download(sid, tmp_path / "dl", selector=lambda p: p == "top.txt")
    assert [p.name for p in (tmp_path / "dl").iterdir()] == ["top.txt"]


def test_delete_removes_the_checkpoint(tmp_path: pathlib.Path) -> None:  # item 22
    base = tmp_path / "base"
    ctx = CheckpointContext(
        single(), storage.SharedFSStorageManager(base), LocalCheckpointReporter()
    )
    sid = ctx.upload(user_dir(tmp_path))
    ctx.delete(sid)
    assert list(base.iterdir()) == []


def test_local_get_metadata_raises_not_implemented(ctx: CheckpointContext) -> None:  # item 22
    with pytest.raises(NotImplementedError, match="metadata.json"):
        ctx.get_metadata(str(uuid.uuid4()))


def test_corrupted_checkpoint_is_refused(tmp_path: pathlib.Path) -> None:
    base = tmp_path / "base"
    ctx = CheckpointContext(
        single(), storage.SharedFSStorageManager(base), LocalCheckpointReporter()
    )
    sid = ctx.upload(user_dir(tmp_path))
    (base / sid / "top.txt").write_bytes(b"TOP")
    with pytest.raises(errors.CheckpointCorrupted, match="top.txt"), ctx.restore_path(sid):
        pass


# --- reporting: local and cluster --------------------------------------------------------------


def cluster_ctx(
    master: RecordingMaster, sm: storage.StorageManager, **kw: Any
) -> CheckpointContext:
    master.route("POST", r"/api/v1/checkpoints", {})
    session = Session(master.url, "alloc-token", max_attempts=1)
    reporter = ClusterCheckpointReporter(
        session, "7.abc", "7.abc.1", **{"storage_backend_id": 4, **kw}
    )
    return CheckpointContext(single(), sm, reporter)


def test_local_reporter_needs_no_steps_completed(  # item 18
    ctx: CheckpointContext, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "determined.core"):
        sid = ctx.upload(user_dir(tmp_path), {"no": "steps"})
    assert f"saved checkpoint {sid}" in caplog.text


def test_cluster_report_has_the_reference_body(
    recording_master: RecordingMaster, tmp_path: pathlib.Path
) -> None:
    calls: list[int] = []
    sm = storage.SharedFSStorageManager(tmp_path / "base")
    ctx = cluster_ctx(recording_master, sm, after_report=lambda: calls.append(1))
    sid = ctx.upload(user_dir(tmp_path), {"steps_completed": 7, "framework": "torch"})
    (req,) = recording_master.find("POST", r"/api/v1/checkpoints")
    body = req.body
    assert req.header("Grpc-Metadata-x-allocation-token") == "Bearer alloc-token"
    assert set(body) == {
        "uuid", "taskId", "allocationId", "reportTime", "resources", "metadata", "state",
        "training", "storageId",
    }  # fmt: skip
    assert body["uuid"] == sid
    assert (body["taskId"], body["allocationId"], body["storageId"]) == ("7.abc", "7.abc.1", 4)
    assert body["state"] == "STATE_COMPLETED" and body["training"] == {}
    assert body["metadata"] == {"steps_completed": 7, "framework": "torch"}
    meta_size = len(json.dumps(body["metadata"], indent=2))
    assert body["resources"] == {
        "metadata.json": str(meta_size),
        "sub/": "0",
        "sub/w.bin": "7",
        "top.txt": "3",
    }
    assert body["reportTime"].endswith("+00:00")
    assert calls == [1]


def test_cluster_report_omits_storage_id_when_unknown(
    recording_master: RecordingMaster, tmp_path: pathlib.Path
) -> None:
    ctx = cluster_ctx(
        recording_master, storage.SharedFSStorageManager(tmp_path / "b"), storage_backend_id=None
    )
    ctx.upload(user_dir(tmp_path), {"steps_completed": 1})
    (req,) = recording_master.find("POST", r"/api/v1/checkpoints")
    assert "storageId" not in req.body


@pytest.mark.parametrize("how", ["upload", "store_path"])
def test_cluster_requires_steps_completed_before_storing(  # item 18 + deviation
    recording_master: RecordingMaster, tmp_path: pathlib.Path, how: str
) -> None:
    """Deviation: the ValueError comes before anything is stored (the reference raises it after
    the upload, leaving an unreported checkpoint behind)."""
    base = tmp_path / "base"
    ctx = cluster_ctx(recording_master, storage.SharedFSStorageManager(base))
    entered = False
    with pytest.raises(ValueError, match="steps_completed"):
        if how == "upload":
            ctx.upload(user_dir(tmp_path), {"other": 1})
        else:
            with ctx.store_path({"other": 1}):
                entered = True
    assert not entered
    assert not base.exists() or list(base.iterdir()) == []
    assert recording_master.find("POST", r"/api/v1/checkpoints") == []


def test_failing_body_stores_and_reports_nothing(
    recording_master: RecordingMaster, sm: storage.StorageManager, tmp_path: pathlib.Path
) -> None:
    ctx = cluster_ctx(recording_master, sm)
    with pytest.raises(ZeroDivisionError), ctx.store_path({"steps_completed": 1}) as (path, sid):
        (path / "half.bin").write_bytes(b"half")
        1 / 0  # noqa: B018
    assert not path.exists()
    assert recording_master.find("POST", r"/api/v1/checkpoints") == []
    with pytest.raises(errors.CheckpointNotFound):
        ctx.download(sid, tmp_path / "dl")


def test_failing_commit_reports_nothing(
    recording_master: RecordingMaster, sm: storage.StorageManager, tmp_path: pathlib.Path
) -> None:
    ctx = cluster_ctx(recording_master, sm)
    with pytest.raises(OSError), ctx.store_path({"steps_completed": 1}) as (path, sid):
        (path / "ok.bin").write_bytes(b"ok")
        # A unix socket is listed like a file but cannot be read: hashing it fails.
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path / "sock"))
    sock.close()
    assert recording_master.find("POST", r"/api/v1/checkpoints") == []
    with pytest.raises(errors.CheckpointNotFound):
        ctx.download(sid, tmp_path / "dl")


def test_cluster_get_metadata_and_delete(
    recording_master: RecordingMaster, tmp_path: pathlib.Path
) -> None:
    base = tmp_path / "base"
    ctx = cluster_ctx(recording_master, storage.SharedFSStorageManager(base))
    sid = ctx.upload(user_dir(tmp_path), {"steps_completed": 2})
    recording_master.route(
        "GET", rf"/api/v1/checkpoints/{sid}", {"checkpoint": {"uuid": sid, "metadata": {"x": 1}}}
    )
    assert ctx.get_metadata(sid) == {"x": 1}
    recording_master.route("GET", r"/api/v1/checkpoints/empty", {"checkpoint": {"uuid": "e"}})
    assert ctx.get_metadata("empty") == {}
    with pytest.raises(errors.CheckpointNotFound, match="missing"):
        ctx.get_metadata("missing")  # unrouted: 404
    recording_master.route("PATCH", r"/api/v1/checkpoints", {})
    ctx.delete(sid)
    assert list(base.iterdir()) == []
    (req,) = recording_master.find("PATCH", r"/api/v1/checkpoints")
    assert req.body == {"checkpoints": [{"uuid": sid, "resources": {"resources": {}}}]}


def test_a_checkpoint_the_master_never_heard_of_is_deleted(tmp_path: pathlib.Path) -> None:
    """With the master down for every attempt, nothing would ever register or GC the
    checkpoint: the trial deletes it before the error goes up (issue #16 item 3)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed
    base = tmp_path / "base"
    session = Session(down, "tok", max_attempts=2, backoff=0.01)
    reporter = ClusterCheckpointReporter(session, "t", "a", 1)
    ctx = CheckpointContext(single(), storage.SharedFSStorageManager(base), reporter)
    with pytest.raises(errors.MasterUnreachable):
        ctx.upload(user_dir(tmp_path), {"steps_completed": 1})
    with pytest.raises(errors.MasterUnreachable), ctx.store_path({"steps_completed": 2}) as (p, _):
        (p / "w").write_bytes(b"w")
    assert list(base.iterdir()) == []
