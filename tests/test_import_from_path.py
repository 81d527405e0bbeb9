"""``det.import_from_path`` (docs/reference/harness.md, 0.37's ``determined.import_from_path``):
two same-named model definitions in one interpreter, nothing written into the imported dir."""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
import threading

import pytest

import determined as det


@pytest.fixture
def two_model_defs(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A current ``model_def`` (package ``helpers`` beside it) in the working directory and an
    old one, with its own ``helpers``, in ``checkpoint/code``."""
    current, old = tmp_path / "work", tmp_path / "checkpoint" / "code"
    for root, version in ((current, "new"), (old, "old")):
        (root / "helpers").mkdir(parents=True)
        (root / "helpers" / "__init__.py").write_text(f"VERSION = {version!r}\n")
        (root / "model_def.py").write_text(
            f"import helpers\nVERSION = {version!r}\nHELPER = helpers.VERSION\n"
        )
    monkeypatch.chdir(current)
    monkeypatch.syspath_prepend(str(current))
    for name in ("model_def", "helpers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield old
    for name in ("model_def", "helpers"):
        sys.modules.pop(name, None)


def test_old_and_new_modules_live_side_by_side(two_model_defs: pathlib.Path) -> None:
    new = importlib.import_module("model_def")
    assert (new.VERSION, new.HELPER) == ("new", "new")
    path_before = list(sys.path)
    with det.import_from_path(two_model_defs):
        old = importlib.import_module("model_def")
        assert (old.VERSION, old.HELPER) == ("old", "old")
        assert sys.path[0] == str(two_model_defs)
    assert old is not new
    assert sys.modules["model_def"] is new and sys.modules["helpers"].VERSION == "new"
    assert sys.path == path_before
    assert not list(two_model_defs.rglob("__pycache__"))  # the checkpoint is left as it was
    assert importlib.import_module("model_def") is new


def test_modules_are_forgotten_even_when_the_block_raises(two_model_defs: pathlib.Path) -> None:
    sys.modules.pop("model_def", None)
    with pytest.raises(ZeroDivisionError), det.import_from_path(two_model_defs):
        importlib.import_module("model_def")
        raise ZeroDivisionError
    assert "model_def" not in sys.modules
    assert importlib.import_module("model_def").VERSION == "new"


def test_blocks_cannot_overlap(two_model_defs: pathlib.Path) -> None:
    with det.import_from_path(two_model_defs):
        nested = det.import_from_path(os.fspath(two_model_defs))
        with pytest.raises(RuntimeError, match="cannot be nested"):
            nested.__enter__()
        errors: list[BaseException] = []

        def other_thread() -> None:
            try:
                with det.import_from_path(two_model_defs):
                    pass
            except RuntimeError as e:
                errors.append(e)

        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert len(errors) == 1
    with det.import_from_path(two_model_defs):  # usable again once the block ended
        pass
