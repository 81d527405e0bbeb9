"""The manifest: listing, hashing, (de)serialising and verifying, on real files."""

from __future__ import annotations

import hashlib
import pathlib
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined import errors
from determined.common.storage import _manifest
from determined.common.storage._manifest import MANIFEST_NAME, FileEntry, Manifest

names = st.text(alphabet="abcxyz_-.0", min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..") and s != MANIFEST_NAME
)
trees = st.dictionaries(
    st.lists(names, min_size=1, max_size=3).map("/".join), st.binary(max_size=300), max_size=8
)


def write(root: pathlib.Path, tree: dict[str, bytes]) -> dict[str, bytes]:
    """Writes the tree, dropping paths that clash with a directory; returns what was written."""
    written: dict[str, bytes] = {}
    for rel, data in sorted(tree.items()):
        path = root / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                continue
            path.write_bytes(data)
        except (NotADirectoryError, FileExistsError):
            continue
        written[rel] = data
    return written


@settings(max_examples=40, deadline=None)
@given(trees)
def test_hash_tree_lists_every_file_with_size_and_sha256(tree: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        written = write(root, tree)
        m = _manifest.hash_tree(root)
        assert m.files == {
            rel: FileEntry(len(d), hashlib.sha256(d).hexdigest()) for rel, d in written.items()
        }
        expected_dirs = {
            "/".join(rel.split("/")[:i]) + "/"
            for rel in written
            for i in range(1, rel.count("/") + 1)
        }
        assert m.dirs == expected_dirs
        assert Manifest.from_json(m.to_json("sid"), "sid") == m
        _manifest.verify_tree("sid", root, m)


def test_list_directory_matches_the_reference_shape(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x").write_bytes(b"123")
    (tmp_path / "top").write_bytes(b"")
    (tmp_path / MANIFEST_NAME).write_bytes(b"{}")  # never part of the resources
    assert _manifest.list_directory(tmp_path) == {"a/": 0, "a/b/": 0, "a/x": 3, "top": 0}


def test_copy_file_hashes_what_it_copies(tmp_path: pathlib.Path) -> None:
    data = bytes(range(256)) * 50_000  # larger than one chunk
    (tmp_path / "src").write_bytes(data)
    entry = _manifest.copy_file(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == data
    assert entry == FileEntry(len(data), hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize(
    "doc",
    [b"", b"[]", b'{"format": 2, "files": {}}', b'{"format": 1}', b'{"format": 1, "files": 3}'],
)
def test_unreadable_manifests_raise_corrupted(doc: bytes) -> None:
    with pytest.raises(errors.CheckpointCorrupted, match="manifest"):
        Manifest.from_json(doc, "sid")


def test_verify_reports_the_first_bad_file_in_sorted_order(tmp_path: pathlib.Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode())
    m = _manifest.hash_tree(tmp_path)
    (tmp_path / "c").write_bytes(b"C")
    (tmp_path / "b").unlink()
    with pytest.raises(errors.CheckpointIncomplete, match="'b' is listed in its manifest"):
        _manifest.verify_tree("sid", tmp_path, m)
