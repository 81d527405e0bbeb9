"""``determined.common._context.read_context``: a model directory plus the SDK's ``includes``
(files and directories added at the top level under their names)."""

from __future__ import annotations

import base64
import pathlib

import pytest

from determined.common import _context


def _tree(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    root = tmp_path / "model"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print(1)\n")
    (root / "pkg" / "a.py").write_text("A = 1\n")
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "x.csv").write_text("1,2\n")
    (data / "skip.tmp").write_text("no\n")
    (data / ".detignore").write_text("*.tmp\n")
    extra = tmp_path / "extra.txt"
    extra.write_text("more\n")
    return root, data, extra


def test_includes_are_added_under_their_names(tmp_path: pathlib.Path) -> None:
    root, data, extra = _tree(tmp_path)
    items = _context.read_context(root, [data, extra])
    files = {i["path"]: i for i in items if i["type"] == ord("0")}
    dirs = {i["path"] for i in items if i["type"] == ord("5")}
    assert set(files) == {"train.py", "pkg/a.py", "data/sub/x.csv", "extra.txt"}
    assert dirs == {"pkg", "data", "data/sub"}
    assert base64.b64decode(files["extra.txt"]["content"]) == b"more\n"
    # An include alone, without a model directory.
    assert [i["path"] for i in _context.read_context(None, [extra])] == ["extra.txt"]


def test_bad_includes_say_what_is_wrong(tmp_path: pathlib.Path) -> None:
    root, _, _ = _tree(tmp_path)
    with pytest.raises(_context.ContextError, match="does not exist"):
        _context.read_context(root, [tmp_path / "nope"])
    clash = tmp_path / "other" / "train.py"
    clash.parent.mkdir()
    clash.write_text("")
    with pytest.raises(_context.ContextError, match="already in the model definition"):
        _context.read_context(root, [clash])
    with pytest.raises(_context.ContextError, match="must be a directory"):
        _context.read_context(root / "train.py")
