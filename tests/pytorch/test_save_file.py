"""save_file: the checkpoint's torch.save, hashed as written and without torch's crc32s
(docs/pytorch.md, "Asynchronous checkpoints"); files load back with torch.load."""

from __future__ import annotations

import hashlib
import pathlib
import zipfile

import pytest
import torch

from determined.common.storage import _manifest
from determined.pytorch import _checkpoint_io


def _state() -> dict[str, object]:
    g = torch.Generator().manual_seed(3)
    return {
        "models_state_dict": [{"w": torch.randn(300_000, generator=g), "b": torch.zeros(3)}],
        "step": 7,
        "nested": {"lr": 0.1, "ids": [1, 2, 3]},
    }


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b


@pytest.mark.parametrize("internals", [True, False])
def test_saved_file_loads_back_and_its_hash_is_remembered(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, internals: bool
) -> None:
    """Both ways (torch's internals without crc32, or plain torch.save where they differ):
    the file loads under weights_only, and the manifest's entry is the file's sha256."""
    monkeypatch.setattr(_checkpoint_io, "_save_internals_known", lambda: internals)
    state, file = _state(), tmp_path / "state_dict.pth"
    _checkpoint_io.save_file(state, file)
    assert _equal(torch.load(file, weights_only=True), state)
    data = file.read_bytes()
    entry = _manifest.FileEntry(len(data), hashlib.sha256(data).hexdigest())
    assert _manifest.hash_tree(tmp_path, fsync=True).files == {"state_dict.pth": entry}


def test_this_torch_has_the_internals_and_the_records_carry_no_crc(tmp_path: pathlib.Path) -> None:
    """With the torch this project pins, the fast path is taken: its records have no crc32
    (zipfile reads the stored 0), while torch.save's have them."""
    assert _checkpoint_io._save_internals_known()
    ours, theirs = tmp_path / "ours.pth", tmp_path / "theirs.pth"
    _checkpoint_io.save_file(_state(), ours)
    torch.save(_state(), theirs)
    with zipfile.ZipFile(ours) as z:
        assert {i.CRC for i in z.infolist()} == {0}
    with zipfile.ZipFile(theirs) as z:
        assert 0 not in {i.CRC for i in z.infolist() if i.file_size}
