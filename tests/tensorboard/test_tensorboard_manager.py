"""determined/tensorboard/_manager.py: syncing TensorBoard files to a directory-backed
storage, synchronously and from the upload thread."""

from __future__ import annotations

import logging
import os
import pathlib
import random
import threading
import time
from collections.abc import Mapping

import numpy as np
import pytest

from determined import tensorboard

SYNC_PATH = tensorboard.get_sync_path("cluster-1", 7, 3)


class RecordingStorage(tensorboard.DirectoryTensorboardStorage):
    """A real directory storage that also remembers what each put_files call copied, and can
    be told to fail its next calls."""

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        self.calls: list[dict[str, str]] = []
        self.failures = 0

    def put_files(self, src_dir: pathlib.Path, dst_prefix: str, files: Mapping[str, str]) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("storage is down")
        random.random()  # like a client's retry jitter: must not disturb training's RNG
        np.random.random()
        super().put_files(src_dir, dst_prefix, files)
        self.calls.append(dict(files))


@pytest.fixture
def base(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "tb"


@pytest.fixture
def store(tmp_path: pathlib.Path) -> RecordingStorage:
    return RecordingStorage(tmp_path / "storage")


def write(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def synced(store: RecordingStorage) -> dict[str, bytes]:
    root = store.root / SYNC_PATH
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def manager(
    base: pathlib.Path, store: RecordingStorage, **kw: bool
) -> tensorboard.TensorboardManager:
    return tensorboard.TensorboardManager(base, SYNC_PATH, store, **kw)


def test_sync_copies_every_file_under_the_trial_sync_path(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    write(base / "events.out.tfevents.1", b"a")
    write(base / "sub" / "deeper" / "plugin.pb", b"bb")
    manager(base, store, async_upload=False).sync()
    assert SYNC_PATH.as_posix() == "cluster-1/tensorboard/experiment/7/trial/3"
    assert synced(store) == {"events.out.tfevents.1": b"a", "sub/deeper/plugin.pb": b"bb"}


def test_only_new_or_changed_files_are_uploaded_again(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    m = manager(base, store, async_upload=False)
    write(base / "a", b"1")
    write(base / "b", b"2")
    m.sync(tensorboard_selector_all)
    m.sync(tensorboard_selector_all)  # nothing changed: no call at all
    write(base / "a", b"11")  # grew
    st = (base / "b").stat()
    write(base / "b", b"3")  # same size, different content and mtime
    os.utime(base / "b", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    write(base / "c", b"new")
    m.sync(tensorboard_selector_all)
    assert store.calls == [{"a": "a", "b": "b"}, {"a": "a", "b": "b", "c": "c"}]
    assert synced(store) == {"a": b"11", "b": b"3", "c": b"new"}


def tensorboard_selector_all(_: pathlib.Path) -> bool:
    return True


def test_automatic_syncs_at_most_once_a_second_explicit_ones_always(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    m = manager(base, store, async_upload=False)
    write(base / "a", b"1")
    m.sync()
    write(base / "b", b"2")
    m.sync()  # automatic, within a second of the last: skipped
    assert synced(store) == {"a": b"1"}
    m.sync(tensorboard_selector_all)  # explicit (upload_tensorboard_files): runs now
    assert synced(store) == {"a": b"1", "b": b"2"}


def test_a_skipped_automatic_sync_is_caught_up_a_second_later(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    m = manager(base, store, async_upload=False)
    m.sync()
    write(base / "a", b"1")
    m.sync()
    assert synced(store) == {}
    time.sleep(1.01)
    m.sync()
    assert synced(store) == {"a": b"1"}


def test_selector_sees_full_paths_and_mangler_renames_with_rank(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    write(base / "keep.tfevents", b"k")
    write(base / "skip.tmp", b"s")
    seen: list[pathlib.Path] = []

    def selector(p: pathlib.Path) -> bool:
        seen.append(p)
        return p.suffix != ".tmp"

    def mangler(p: pathlib.Path, rank: int) -> pathlib.Path:
        assert not p.is_absolute()
        return pathlib.Path(f"rank{rank}") / p

    manager(base, store, async_upload=False).sync(selector, mangler, rank=2)
    assert sorted(seen) == [base / "keep.tfevents", base / "skip.tmp"]
    assert synced(store) == {"rank2/keep.tfevents": b"k"}


def test_a_file_skipped_by_the_selector_is_uploaded_when_selected_later(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    m = manager(base, store, async_upload=False)
    write(base / "x", b"1")
    m.sync(lambda p: False)
    m.sync(tensorboard_selector_all)
    assert synced(store) == {"x": b"1"}


@pytest.mark.parametrize("bad", ["/etc/passwd", "../escape", "a/../../b", "."])
def test_a_mangler_that_leaves_the_trial_directory_raises(
    base: pathlib.Path, store: RecordingStorage, bad: str
) -> None:
    write(base / "a", b"1")
    m = manager(base, store, async_upload=False)
    write(base / "b", b"2")
    with pytest.raises(ValueError, match="mangler"):
        m.sync(mangler=lambda p, r: p if p.name == "a" else pathlib.Path(bad))
    assert synced(store) == {}
    m.sync(tensorboard_selector_all)  # nothing was recorded as uploaded by the failed sync
    assert synced(store) == {"a": b"1", "b": b"2"}


def test_missing_base_path_syncs_nothing(base: pathlib.Path, store: RecordingStorage) -> None:
    m = manager(base, store, async_upload=False)
    m.sync()
    m.close()
    assert store.calls == []


def test_synchronous_failure_raises_and_is_retried(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    m = manager(base, store, async_upload=False)
    write(base / "a", b"1")
    store.failures = 1
    with pytest.raises(OSError, match="storage is down"):
        m.sync(tensorboard_selector_all)
    m.sync(tensorboard_selector_all)
    assert synced(store) == {"a": b"1"}


def test_global_rngs_are_untouched_by_a_synchronous_sync(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    write(base / "a", b"1")
    random.seed(1)
    np.random.seed(1)
    manager(base, store, async_upload=False).sync()
    assert store.calls  # the storage drew random numbers...
    assert random.random() == random.Random(1).random()  # ...but training sees the same
    assert np.random.random() == np.random.RandomState(1).random_sample()


def test_async_uploads_finish_by_close_with_a_final_sync(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    with manager(base, store) as m:
        for i in range(5):
            write(base / f"f{i}", bytes([i]))
            m.sync(tensorboard_selector_all)
        write(base / "late", b"L")  # written after the last sync: picked up by close()
    assert synced(store) == {**{f"f{i}": bytes([i]) for i in range(5)}, "late": b"L"}
    assert not [t for t in threading.enumerate() if t.name == "tensorboard-upload"]


def test_no_final_sync_without_sync_on_close(base: pathlib.Path, store: RecordingStorage) -> None:
    with manager(base, store, sync_on_close=False) as m:
        write(base / "a", b"1")
        m.sync(tensorboard_selector_all)
        write(base / "b", b"2")
    assert synced(store) == {"a": b"1"}


def test_async_failure_warns_and_the_next_sync_retries(
    base: pathlib.Path, store: RecordingStorage, caplog: pytest.LogCaptureFixture
) -> None:
    write(base / "a", b"1")
    store.failures = 1
    m = manager(base, store, sync_on_close=False)
    m.start()
    with caplog.at_level(logging.WARNING, logger="determined.tensorboard"):
        m.sync(tensorboard_selector_all)
        m.close()  # drains the queue: the failed upload has run
    assert "storage is down" in caplog.text and "retried" in caplog.text
    assert synced(store) == {}
    m.sync(tensorboard_selector_all)  # after close: synchronous, and it retries "a"
    assert synced(store) == {"a": b"1"}


def test_start_twice_and_close_twice_are_harmless(
    base: pathlib.Path, store: RecordingStorage
) -> None:
    m = manager(base, store)
    m.start()
    m.start()
    write(base / "a", b"1")
    m.close()
    m.close()
    m.start()  # a finished thread is not restarted
    assert synced(store) == {"a": b"1"}
