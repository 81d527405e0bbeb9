"""``.detignore`` with git's ignore rules (``**``, ``!`` negation, anchoring, ``dir/``), the same
answers as Determined 0.37's CLI for the same directory, for ``det e create``'s context and a
checkpoint's ``code/`` copy alike."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.common import _context
from determined.pytorch import _state

REF_PYTHON = pathlib.Path(__file__).resolve().parents[2] / ".refvenv" / "bin" / "python"

TREE = [
    "train.py",
    "keep.log",
    "a.log",
    "data/x.bin",
    "sub/data/y.bin",
    "sub/notes.txt",
    "sub/deep/notes.txt",
    "notes/a/b/readme.md",
    "top.txt",
    "sub/top.txt",
    "build/out.o",
]
DETIGNORE = "**/data/\n*.log\n!keep.log\n/top.txt\nnotes/**/readme.md\nbuild/\n# a comment\n"


def _make(root: pathlib.Path, files: list[str], detignore: str) -> None:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / ".detignore").write_text(detignore)


def _context_files(root: pathlib.Path) -> list[str]:
    return sorted(f["path"] for f in _context.read_context(root) if f["type"] == ord("0"))


def test_git_rules_for_the_experiment_context(tmp_path: pathlib.Path) -> None:
    _make(tmp_path, TREE, DETIGNORE)
    assert _context_files(tmp_path) == [
        "keep.log",  # brought back by !keep.log
        "sub/deep/notes.txt",
        "sub/notes.txt",
        "sub/top.txt",  # /top.txt is anchored to the root
        "train.py",
    ]


def test_the_checkpoint_code_copy_uses_the_same_rules(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    _make(src, TREE, DETIGNORE)
    _state.copy_code(src, dst)
    copied = sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file())
    assert copied == _context_files(src)


def _reference_files(root: pathlib.Path) -> list[str]:
    program = (
        "import json, pathlib, sys\n"
        "from determined.common import detignore\n"
        "root = pathlib.Path(sys.argv[1])\n"
        "files = detignore.os_walk_to_v1Files(root, pathlib.Path('.'))\n"
        "print(json.dumps(sorted(f.path for f in files if f.type == ord('0'))))\n"
    )
    done = subprocess.run(
        [str(REF_PYTHON), "-I", "-c", program, str(root)],  # -I: the reference, not this tree
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return [p.removeprefix("./") for p in json.loads(done.stdout)]


@pytest.mark.skipif(not REF_PYTHON.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_the_same_files_as_the_reference(tmp_path: pathlib.Path) -> None:
    _make(tmp_path, TREE, DETIGNORE)
    assert _context_files(tmp_path) == _reference_files(tmp_path)


names = st.sampled_from(["a", "b", "data", "x.log", "y.py", "n-1"])
patterns = st.sampled_from(
    ["*.log", "!x.log", "data/", "/a", "**/b", "a/**", "b/*.py", "!a/y.py", "[ab]", "?", "!*"]
)


@settings(max_examples=100, deadline=None)
@given(st.lists(patterns, max_size=6), names, names)
def test_the_last_matching_line_wins(lines: list[str], directory: str, name: str) -> None:
    """Whatever came before, a last line naming a file decides it: ignored by ``name`` or
    ``**/name``, kept by ``!name`` (a file directly in the root has no parent to exclude it)."""
    assert _context.Ignore([*lines, name]).match(name, False)
    assert not _context.Ignore([*lines, f"!{name}"]).match(name, False)
    assert _context.Ignore([*lines, f"**/{name}"]).match(f"{directory}/{name}", False)
    assert _context.Ignore([*lines, f"/{name}"]).match(name, False)
    # Anchored: only the root's; elsewhere only when its directory is itself that name.
    nested = _context.Ignore([f"/{name}"]).match(f"{directory}/{name}", False)
    assert nested == (directory == name)
