"""shared_fs/directory specifics: the staging name, rename-commit, a killed writer."""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from determined import errors
from determined.common.storage import MANIFEST_NAME, DirectoryStorageManager, Manifest


def test_store_path_writes_under_a_hidden_staging_name_then_renames(tmp_path: pathlib.Path) -> None:
    sm = DirectoryStorageManager(tmp_path / "base")
    sid = str(uuid.uuid4())
    with sm.store_path(sid) as path:
        assert path == tmp_path / "base" / f".{sid}.tmp"
        (path / "w").write_bytes(b"1")
        assert not (tmp_path / "base" / sid).exists()
    assert sorted(os.listdir(tmp_path / "base")) == [sid]
    assert sorted(os.listdir(tmp_path / "base" / sid)) == [MANIFEST_NAME, "w"]


def test_base_is_created_with_mode_0777_less_umask(tmp_path: pathlib.Path) -> None:
    old = os.umask(0)
    try:
        sm = DirectoryStorageManager(tmp_path / "a" / "b")
        sm.pre_store_path(str(uuid.uuid4()))
    finally:
        os.umask(old)
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o777


def test_restore_path_is_in_place_and_ignores_a_selector(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    sm = DirectoryStorageManager(tmp_path)
    sid = str(uuid.uuid4())
    with sm.store_path(sid) as path:
        (path / "a").write_bytes(b"1")
        (path / "b").write_bytes(b"2")
    with caplog.at_level(logging.WARNING), sm.restore_path(sid, lambda p: p == "a") as got:
        assert got == tmp_path / sid
        assert (got / "b").exists()
    assert "selector is ignored" in caplog.text


def test_commit_never_replaces_an_existing_checkpoint(tmp_path: pathlib.Path) -> None:
    sm = DirectoryStorageManager(tmp_path)
    sid = str(uuid.uuid4())
    (tmp_path / sid).mkdir()
    sm.begin(sid)
    with pytest.raises(errors.InternalException, match="already exists"):
        sm.commit(sid, Manifest())


@pytest.mark.parametrize("sid", ["", "a/b", ".hidden", "../x"])
def test_bad_storage_ids_are_refused(tmp_path: pathlib.Path, sid: str) -> None:
    with pytest.raises(ValueError, match="not a valid checkpoint storage id"):
        DirectoryStorageManager(tmp_path).pre_store_path(sid)


def test_writer_killed_mid_checkpoint_leaves_only_an_incomplete_staging_dir(
    tmp_path: pathlib.Path,
) -> None:
    """A real process dies (SIGKILL) inside store_path: nothing appears at <base>/<id>, and
    the leftover is refused as incomplete."""
    sid = str(uuid.uuid4())
    script = textwrap.dedent(
        f"""
        import os, signal
        from determined.common.storage import DirectoryStorageManager
        sm = DirectoryStorageManager({str(tmp_path)!r})
        with sm.store_path({sid!r}) as path:
            (path / "half.bin").write_bytes(b"x" * 1000)
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / sid).exists()
    sm = DirectoryStorageManager(tmp_path)
    with pytest.raises(errors.CheckpointIncomplete, match="never committed"), sm.restore_path(sid):
        pass
