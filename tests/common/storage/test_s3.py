"""s3 specifics against moto's real server: object layout, the in-progress marker, a partial
upload, the missing-extra message."""

from __future__ import annotations

import pathlib
import socket
import sys
import tempfile
import uuid
from typing import Any

import pytest

from determined import errors
from determined.common import storage
from determined.common.storage import MANIFEST_NAME, MARKER_NAME


def keys(client: Any, bucket: str) -> set[str]:
    resp = client.list_objects_v2(Bucket=bucket)
    return {o["Key"] for o in resp.get("Contents", [])}


def test_objects_live_under_prefix_and_id(
    s3_config: dict[str, Any], s3_client: Any, tmp_path: pathlib.Path
) -> None:
    sm = storage.build(s3_config)
    sid = str(uuid.uuid4())
    with sm.store_path(sid) as path:
        assert path == pathlib.Path(tempfile.gettempdir()) / sid
        (path / "d").mkdir()
        (path / "d" / "w.bin").write_bytes(b"w")
    head = f"runs/exp1/{sid}/"
    assert keys(s3_client, s3_config["bucket"]) == {
        head + "d/",
        head + "d/w.bin",
        head + MANIFEST_NAME,
    }
    assert not path.exists()  # the local staging copy is removed after the upload


def test_upload_that_dies_after_some_files_is_refused(
    s3_config: dict[str, Any], s3_client: Any, tmp_path: pathlib.Path
) -> None:
    """The marker goes up first, so files without a manifest read as never committed."""
    sm = storage.build(s3_config)
    sid = str(uuid.uuid4())
    sm.begin(sid)
    head = f"runs/exp1/{sid}/"
    s3_client.put_object(Bucket=s3_config["bucket"], Key=head + "model.bin", Body=b"half")
    assert keys(s3_client, s3_config["bucket"]) == {head + MARKER_NAME, head + "model.bin"}
    with pytest.raises(errors.CheckpointIncomplete, match="never committed"):
        sm.download(sid, tmp_path / "dst")
    with pytest.raises(errors.CheckpointIncomplete), sm.restore_path(sid):
        pass


def test_failed_upload_cleans_up_after_itself(
    s3_config: dict[str, Any], s3_client: Any, tmp_path: pathlib.Path
) -> None:
    sm = storage.build(s3_config)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"ok")
    (src / "b.bin").write_bytes(b"ok")
    # A unix socket is listed like a file but cannot be opened: the upload fails midway.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
        with pytest.raises(OSError):
            sm.upload(src, str(uuid.uuid4()))
    assert keys(s3_client, s3_config["bucket"]) == set()


def test_credentials_and_endpoint_come_from_the_config(s3_config: dict[str, Any]) -> None:
    wrong = dict(s3_config, endpoint_url="http://127.0.0.1:9")  # nothing listens on port 9
    sm = storage.build(wrong)
    with pytest.raises(Exception, match="127.0.0.1:9"):
        sm.download(str(uuid.uuid4()), "/nonexistent")


def test_missing_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ImportError, match=r"redetermined\[s3\]"):
        storage.build({"type": "s3", "bucket": "b"})


def test_missing_gcs_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    monkeypatch.setitem(sys.modules, "google.cloud", None)
    with pytest.raises(ImportError, match=r"redetermined\[gcs\]"):
        storage.from_string("gs://bucket/prefix")
