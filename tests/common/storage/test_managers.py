"""One suite, every backend: shared_fs, directory (real files in tmp_path) and s3 (moto's real
server on 127.0.0.1). Covers the commit protocol and verified reads."""

from __future__ import annotations

import logging
import pathlib
import uuid
from typing import Any

import pytest

from determined import errors
from determined.common import storage
from determined.common.storage import MANIFEST_NAME, MARKER_NAME


class Backend:
    """A storage manager plus direct access to what it stored, to damage it on purpose."""

    def __init__(self, kind: str, sm: storage.StorageManager, where: Any) -> None:
        self.kind, self.sm, self.where = kind, sm, where

    def write(self, sid: str, rel: str, data: bytes) -> None:
        if self.kind == "azure":
            container, prefix = self.where
            container.upload_blob(f"{prefix}/{sid}/{rel}", data, overwrite=True)
        elif self.kind == "s3":
            client, bucket, prefix = self.where
            client.put_object(Bucket=bucket, Key=f"{prefix}/{sid}/{rel}", Body=data)
        else:
            path = pathlib.Path(self.where, sid, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def remove(self, sid: str, rel: str) -> None:
        if self.kind == "azure":
            container, prefix = self.where
            container.delete_blob(f"{prefix}/{sid}/{rel}")
        elif self.kind == "s3":
            client, bucket, prefix = self.where
            client.delete_object(Bucket=bucket, Key=f"{prefix}/{sid}/{rel}")
        else:
            pathlib.Path(self.where, sid, rel).unlink()

    def names(self, sid: str) -> set[str]:
        """Everything stored under ``sid``, as relative names."""
        if self.kind == "azure":
            container, prefix = self.where
            head = f"{prefix}/{sid}/"
            return {b.name[len(head) :] for b in container.list_blobs(name_starts_with=head)}
        if self.kind == "s3":
            client, bucket, prefix = self.where
            resp = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{sid}/")
            return {o["Key"][len(f"{prefix}/{sid}/") :] for o in resp.get("Contents", [])}
        root = pathlib.Path(self.where, sid)
        return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.fixture(params=["shared_fs", "directory", "s3", "azure"])
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Backend:
    if request.param == "azure":
        from azure.storage.blob import ContainerClient

        cfg = request.getfixturevalue("azure_config")
        name, _, prefix = cfg["container"].partition("/")
        sm = storage.build(cfg)  # creates the container
        client = ContainerClient.from_connection_string(cfg["connection_string"], name)
        return Backend("azure", sm, (client, prefix))
    if request.param == "shared_fs":
        sm = storage.build({"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "c"})
        return Backend("shared_fs", sm, tmp_path / "c")
    if request.param == "directory":
        sm = storage.build({"type": "directory", "container_path": str(tmp_path / "d")})
        return Backend("directory", sm, tmp_path / "d")
    cfg = request.getfixturevalue("s3_config")
    client = request.getfixturevalue("s3_client")
    sm = storage.build(cfg)
    return Backend("s3", sm, (client, cfg["bucket"], cfg["prefix"]))


def make_tree(root: pathlib.Path) -> dict[str, bytes]:
    files = {
        "model.bin": bytes(range(256)) * 40,
        "sub/opt.bin": b"optimizer state",
        "sub/deeper/rng.json": b'{"seed": 1}',
        "empty.txt": b"",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "emptydir").mkdir()
    return files


def read_tree(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != MANIFEST_NAME
    }


def test_upload_download_round_trip(backend: Backend, tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    files = make_tree(src)
    sid = str(uuid.uuid4())
    manifest = backend.sm.upload(src, sid)
    assert set(manifest.files) == set(files)
    assert manifest.resources()["emptydir/"] == 0
    assert manifest.resources()["model.bin"] == len(files["model.bin"])
    backend.sm.download(sid, tmp_path / "dst")
    assert read_tree(tmp_path / "dst") == files
    assert (tmp_path / "dst" / "emptydir").is_dir()
    assert MANIFEST_NAME in backend.names(sid)
    assert MARKER_NAME not in backend.names(sid)


def test_upload_only_the_given_paths(backend: Backend, tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    sid = str(uuid.uuid4())
    backend.sm.upload(src, sid, paths={"sub/", "sub/opt.bin"})
    backend.sm.download(sid, tmp_path / "dst")
    assert read_tree(tmp_path / "dst") == {"sub/opt.bin": b"optimizer state"}


def test_store_path_commits_on_clean_exit(backend: Backend, tmp_path: pathlib.Path) -> None:
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        files = make_tree(path)
        assert backend.names(sid) == set()  # nothing visible before the commit
    with backend.sm.restore_path(sid) as restored:
        assert read_tree(restored) == files


def test_failing_store_path_leaves_nothing(backend: Backend) -> None:
    sid = str(uuid.uuid4())
    with pytest.raises(KeyError, match="boom"), backend.sm.store_path(sid) as path:
        make_tree(path)
        raise KeyError("boom")
    assert backend.names(sid) == set()
    assert not path.exists()  # the staging directory is gone too
    with pytest.raises(errors.CheckpointNotFound):
        backend.sm.download(sid, "/nonexistent")


def test_restore_path_of_a_cloud_checkpoint_is_temporary(backend: Backend) -> None:
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        make_tree(path)
    with backend.sm.restore_path(sid) as restored:
        assert (restored / "sub" / "opt.bin").read_bytes() == b"optimizer state"
    assert restored.exists() == (backend.kind in ("shared_fs", "directory"))


def test_download_with_a_selector(backend: Backend, tmp_path: pathlib.Path) -> None:
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        make_tree(path)
    backend.sm.download(sid, tmp_path / "dst", selector=lambda p: p.startswith("sub/"))
    assert set(read_tree(tmp_path / "dst")) == {"sub/opt.bin", "sub/deeper/rng.json"}


@pytest.mark.parametrize("damage", ["changed", "truncated", "removed"])
@pytest.mark.parametrize("how", ["restore_path", "download"])
def test_damaged_checkpoint_raises_naming_the_file(
    backend: Backend, tmp_path: pathlib.Path, damage: str, how: str
) -> None:
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        make_tree(path)
    if damage == "changed":
        backend.write(sid, "sub/opt.bin", b"OPTIMIZER STATE")  # same size, other bytes
    elif damage == "truncated":
        backend.write(sid, "sub/opt.bin", b"optim")
    else:
        backend.remove(sid, "sub/opt.bin")
    expected = errors.CheckpointIncomplete if damage == "removed" else errors.CheckpointCorrupted
    with pytest.raises(expected, match="sub/opt.bin") as info:
        if how == "download":
            backend.sm.download(sid, tmp_path / "dst")
        else:
            with backend.sm.restore_path(sid):
                pass
    assert info.value.path == "sub/opt.bin"
    assert info.value.storage_id == sid
    if damage != "removed":
        assert not isinstance(info.value, errors.CheckpointIncomplete)


def test_a_selector_skips_damage_outside_it(backend: Backend, tmp_path: pathlib.Path) -> None:
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        make_tree(path)
    backend.write(sid, "model.bin", b"garbage")
    backend.sm.download(sid, tmp_path / "dst", selector=lambda p: p.startswith("sub"))
    assert (tmp_path / "dst" / "sub" / "opt.bin").exists()


def test_unreadable_manifest_is_corrupted(backend: Backend) -> None:
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        make_tree(path)
    backend.write(sid, MANIFEST_NAME, b"{not json")
    with pytest.raises(errors.CheckpointCorrupted, match=MANIFEST_NAME):
        backend.sm.download(sid, "/nonexistent/never")


def test_checkpoint_without_manifest_is_read_with_a_warning(
    backend: Backend, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid = str(uuid.uuid4())
    backend.write(sid, "metadata.json", b'{"steps_completed": 3}')
    backend.write(sid, "w/state.pt", b"weights written by Determined 0.37")
    with caplog.at_level(logging.WARNING, "determined.common.storage"):
        backend.sm.download(sid, tmp_path / "dst")
    assert read_tree(tmp_path / "dst") == {
        "metadata.json": b'{"steps_completed": 3}',
        "w/state.pt": b"weights written by Determined 0.37",
    }
    assert f"checkpoint {sid}" in caplog.text and "without verifying" in caplog.text


def test_unknown_id_raises_not_found(backend: Backend, tmp_path: pathlib.Path) -> None:
    sid = str(uuid.uuid4())
    with pytest.raises(errors.CheckpointNotFound, match=sid):
        backend.sm.download(sid, tmp_path / "dst")
    with pytest.raises(errors.CheckpointNotFound), backend.sm.restore_path(sid):
        pass


def test_delete(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        make_tree(path)
    backend.sm.delete(sid)
    assert backend.names(sid) == set()
    with pytest.raises(errors.CheckpointNotFound):
        backend.sm.download(sid, "/nonexistent/never")
    with caplog.at_level(logging.WARNING, "determined.common.storage"):
        backend.sm.delete(sid)  # already gone: logged, not raised
    assert "nothing to" in caplog.text


def test_remove_files_rewrites_the_manifest_then_deletes(
    backend: Backend, tmp_path: pathlib.Path
) -> None:
    """``det c rm --glob``: the named files go, the rest still downloads verified; with no
    globs nothing changes; naming every file deletes the checkpoint."""
    sid = str(uuid.uuid4())
    with backend.sm.store_path(sid) as path:
        files = make_tree(path)
    left = backend.sm.remove_files(sid, ["sub", "*.txt"])
    assert set(left) == {"model.bin", "emptydir/"} or set(left) == {"model.bin"}
    assert left["model.bin"] == len(files["model.bin"])
    assert not any(n.startswith("sub/") or n.endswith(".txt") for n in backend.names(sid))
    backend.sm.download(sid, tmp_path / "dst")  # verified against the rewritten manifest
    assert read_tree(tmp_path / "dst") == {"model.bin": files["model.bin"]}
    assert backend.sm.remove_files(sid, []) == left  # no globs: only reads
    assert backend.sm.remove_files(sid, ["**/*"]) == {}
    assert backend.names(sid) == set()
    with pytest.raises(errors.CheckpointNotFound):
        backend.sm.remove_files(sid, ["x"])


def test_staged_but_uncommitted_write_is_incomplete(
    backend: Backend, tmp_path: pathlib.Path
) -> None:
    """What a crash between ``put`` and ``commit`` leaves behind is refused, never used."""
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    sid = str(uuid.uuid4())
    backend.sm.begin(sid)
    backend.sm.put(src, sid)
    with pytest.raises(errors.CheckpointIncomplete, match="never committed"):
        backend.sm.download(sid, tmp_path / "dst")
    backend.sm.abort(sid)
    with pytest.raises(errors.CheckpointNotFound):
        backend.sm.download(sid, tmp_path / "dst")


def test_put_files_accumulate_under_a_prefix(backend: Backend, tmp_path: pathlib.Path) -> None:
    """Files outside any checkpoint (batch-inference outputs, TensorBoard files): each call
    adds its files under the prefix and replaces those of the same name."""
    src = tmp_path / "out-src"
    (src / "sub").mkdir(parents=True)
    (src / "a").write_bytes(b"1")
    (src / "sub" / "b").write_bytes(b"22")
    backend.sm.put_files(src, "outputs/rank_0", {"a": "a", "sub/b": "sub/b"})
    (src / "a").write_bytes(b"333")
    backend.sm.put_files(src, "outputs/rank_0", {"a": "c"})
    backend.sm.put_files(src, "outputs/rank_0", {"a": "a"})
    dirs = {"rank_0", "rank_0/sub"}  # listed for directories, not for buckets
    assert backend.names("outputs") - dirs == {
        "rank_0/a",
        "rank_0/c",
        "rank_0/sub/b",
    }
    if backend.kind in ("shared_fs", "directory"):
        root = backend.where / "outputs" / "rank_0"
        assert [(root / n).read_bytes() for n in ("a", "c", "sub/b")] == [b"333", b"333", b"22"]
        with pytest.raises(ValueError, match="leaves the storage's base path"):
            backend.sm.put_files(src, "../escape", {"a": "a"})
