"""``det.import_from_path``: two identically named modules side by side (0.37's
``determined._import``; docs/reference/compatibility.md)."""

from __future__ import annotations

import pathlib
import sys
import threading

import pytest

import determined as det


def _write(directory: pathlib.Path, version: int) -> pathlib.Path:
    directory.mkdir()
    (directory / "model_def_ifp.py").write_text(
        f"import helper_ifp\nVERSION = {version}\nHELPER = helper_ifp.NAME\n"
    )
    (directory / "helper_ifp.py").write_text(f"NAME = 'helper v{version}'\n")
    return directory


def test_old_and_new_modules_side_by_side(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module imported before the block stays; inside, the same name comes from the
    checkpoint directory (with its own sibling imports); afterwards the new one is back, the
    old one is forgotten, and nothing was written into the directory."""
    new_dir, old_dir = _write(tmp_path / "new", 2), _write(tmp_path / "old", 1)
    monkeypatch.syspath_prepend(str(new_dir))
    import model_def_ifp as new  # type: ignore[import-not-found]

    path_before = list(sys.path)
    with det.import_from_path(old_dir):
        import model_def_ifp as old  # type: ignore[import-not-found]

        assert str(old_dir.resolve()) == sys.path[0]
    assert (new.VERSION, new.HELPER) == (2, "helper v2")
    assert (old.VERSION, old.HELPER) == (1, "helper v1")
    assert sys.modules["model_def_ifp"] is new
    assert sys.modules["helper_ifp"].NAME == "helper v2"
    assert sys.path == path_before
    assert sorted(p.name for p in old_dir.iterdir()) == ["helper_ifp.py", "model_def_ifp.py"]
    for name in ("model_def_ifp", "helper_ifp"):
        sys.modules.pop(name)


def test_nesting_and_threads_raise_runtime_error(tmp_path: pathlib.Path) -> None:
    """As in 0.37: no nesting, no second thread at once (RuntimeError); a missing directory
    is a FileNotFoundError naming it."""
    with det.import_from_path(tmp_path):
        with pytest.raises(RuntimeError, match="nested"), det.import_from_path(tmp_path):
            pass
        errors: list[BaseException] = []

        def other() -> None:
            try:
                with det.import_from_path(tmp_path):
                    pass
            except RuntimeError as e:
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 1
    with det.import_from_path(tmp_path):  # released after the block
        pass
    with (
        pytest.raises(FileNotFoundError, match="missing"),
        det.import_from_path(tmp_path / "missing"),
    ):
        pass
