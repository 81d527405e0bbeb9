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


# ---- HashedFile: hashed while written, trusted only while the file is unchanged ----------------


@pytest.mark.parametrize("overlap", [True, False])
@given(chunks=st.lists(st.binary(max_size=3000), max_size=6))
@settings(max_examples=25, deadline=None)
def test_hashed_file_entry_is_the_files_hash(overlap: bool, chunks: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp, "f.bin")
        old = (_manifest._OVERLAP, _manifest._overlap_hashing, _manifest._WRITEBACK)
        # Tiny thresholds send even these small writes through the hashing thread, and start
        # writeback (which drops the written pages once clean) every few KB.
        _manifest._OVERLAP, _manifest._overlap_hashing = 1024, lambda: overlap
        _manifest._WRITEBACK = 4096
        try:
            with _manifest.HashedFile(path) as f:
                for c in chunks:
                    assert f.write(c) == len(c)
        finally:
            _manifest._OVERLAP, _manifest._overlap_hashing, _manifest._WRITEBACK = old
        data = b"".join(chunks)
        assert path.read_bytes() == data
        assert f.entry == FileEntry(len(data), hashlib.sha256(data).hexdigest())
        assert _manifest.hash_tree(tmp, fsync=True).files == {"f.bin": f.entry}


def test_torch_save_through_hashed_file_loads_back() -> None:
    torch = pytest.importorskip("torch")
    state = {"w": torch.arange(1_000_000, dtype=torch.float32), "step": 3}
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp, "state.pth")
        with _manifest.HashedFile(path) as f:
            torch.save(state, f)
        assert f.entry == FileEntry(
            path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
        )
        back = torch.load(path)
        assert back["step"] == 3 and torch.equal(back["w"], state["w"])


def test_a_file_changed_after_its_hashed_write_is_hashed_again() -> None:
    """The remembered entry is a shortcut, never a way to commit bytes nobody hashed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp, "f.bin")
        with _manifest.HashedFile(path) as f:
            f.write(b"a" * 5000)
        with open(path, "ab") as g:
            g.write(b"b")
        manifest = _manifest.hash_tree(tmp, fsync=True)
        data = path.read_bytes()
        assert manifest.files["f.bin"] == FileEntry(5001, hashlib.sha256(data).hexdigest())
        assert manifest.files["f.bin"] != f.entry


def test_a_failed_hashed_write_leaves_no_entry() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp, "f.bin")
        with pytest.raises(RuntimeError), _manifest.HashedFile(path) as f:
            f.write(b"partial")
            raise RuntimeError("serialisation failed")
        assert _manifest._written_entry(path) is None


def test_remembered_entries_are_bounded() -> None:
    """Entries nobody collects (another process commits the files) do not pile up."""
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(_manifest._WRITTEN_MAX + 10):
            with _manifest.HashedFile(pathlib.Path(tmp, f"f{i}")) as f:
                f.write(b"x")
        assert len(_manifest._written) <= _manifest._WRITTEN_MAX
        last = pathlib.Path(tmp, f"f{_manifest._WRITTEN_MAX + 9}")
        assert _manifest._written_entry(last) == FileEntry(1, hashlib.sha256(b"x").hexdigest())
