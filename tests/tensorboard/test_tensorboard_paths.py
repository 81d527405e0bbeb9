"""determined/tensorboard/_paths.py: local and cluster TensorBoard directories, storage layout."""

from __future__ import annotations

import pathlib

import pytest

from determined import tensorboard


def test_cluster_base_path_uses_allocation_and_horovod_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert tensorboard.get_base_path({}) == pathlib.Path("/tmp/tensorboard--0")
    monkeypatch.setenv("DET_ALLOCATION_ID", "7.abc.1")
    assert tensorboard.get_base_path({}) == pathlib.Path("/tmp/tensorboard-7.abc.1-0")
    monkeypatch.setenv("HOROVOD_RANK", "3")
    assert tensorboard.get_base_path({"type": "s3", "base_path": None}) == pathlib.Path(
        "/tmp/tensorboard-7.abc.1-3"
    )
    assert tensorboard.get_base_path({"base_path": "/scratch"}) == pathlib.Path(
        "/scratch/tensorboard-7.abc.1-3"
    )


def test_storage_layout() -> None:
    assert str(tensorboard.get_experiment_sync_path("c1", 7)) == "c1/tensorboard/experiment/7"
    assert str(tensorboard.get_sync_path("c1", "7", 12)) == "c1/tensorboard/experiment/7/trial/12"


def test_local_base_path_is_under_the_data_dir(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "det_home" / "tensorboard"  # DET_HOME is set by tests/conftest.py
    assert tensorboard.local_base_path("my-run") == root / "my-run"
    a, b = tensorboard.local_base_path(), tensorboard.local_base_path()
    assert a.parent == b.parent == root and a != b and len(a.name) == 32


@pytest.mark.parametrize("name", ["", "a/b", ".", ".."])
def test_local_base_path_rejects_names_that_are_not_one_directory(name: str) -> None:
    with pytest.raises(ValueError, match="run name"):
        tensorboard.local_base_path(name)


def test_exported_names_are_importable() -> None:
    for name in tensorboard.__all__:
        assert getattr(tensorboard, name) is not None
