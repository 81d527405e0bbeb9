"""``det.import_from_path``: import modules from a directory (a checkpoint's ``code/``) beside
identically named modules already imported, as Determined 0.37 does."""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import threading
import types
from collections.abc import Iterator

_active = threading.Lock()


def _top_level_names(directory: pathlib.Path) -> set[str]:
    """Names importable from the top of ``directory``: ``x.py`` and packages ``x/``."""
    names = set()
    for entry in directory.iterdir():
        if entry.suffix == ".py":
            names.add(entry.stem)
        elif (entry / "__init__.py").is_file():
            names.add(entry.name)
    return names


def _under(module: types.ModuleType | None, directory: pathlib.Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and pathlib.Path(file).resolve().is_relative_to(directory)


@contextlib.contextmanager
def import_from_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, ``import x`` finds ``x`` in ``path`` first, even if another ``x`` is
    already imported; afterwards the modules loaded from ``path`` are forgotten and the earlier
    ones are back, so both can be used side by side::

        import model_def as new_model_def

        with det.import_from_path(checkpoint_dir / "code"):
            import model_def as old_model_def

    No ``__pycache__`` is written into ``path``. Blocks cannot be nested or entered from two
    threads at once (RuntimeError), as in 0.37.
    """
    directory = pathlib.Path(path).resolve()
    if not directory.is_dir():
        raise FileNotFoundError(f"import_from_path: {directory} is not a directory")
    if not _active.acquire(blocking=False):
        raise RuntimeError(
            "det.import_from_path cannot be nested or used from several threads at once"
        )
    shadowed = _top_level_names(directory)
    # Set aside modules (and their submodules) that the directory's own would collide with.
    stashed = {
        name: sys.modules.pop(name)
        for name in list(sys.modules)
        if name.partition(".")[0] in shadowed and not _under(sys.modules[name], directory)
    }
    old_path, old_bytecode = list(sys.path), sys.dont_write_bytecode
    sys.path.insert(0, str(directory))
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = old_bytecode
        sys.path[:] = old_path
        for name in [n for n, m in sys.modules.items() if _under(m, directory)]:
            del sys.modules[name]
        sys.modules.update(stashed)
        _active.release()
