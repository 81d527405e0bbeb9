"""``det.import_from_path``: import a module from a directory (a checkpoint's code, say) beside a
same-named module already imported, without either replacing the other."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from types import ModuleType

_active = threading.Lock()


def _module_dir(module: ModuleType) -> str | None:
    """The directory a module was imported from (a package's parent directory)."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    folder, name = os.path.split(os.path.abspath(file))
    if name.startswith("__init__."):
        folder = os.path.dirname(folder)
    return folder


def _modules_from(folder: str) -> dict[str, ModuleType]:
    """The loaded modules whose top-level package or module file lives in ``folder``."""
    roots = {
        name
        for name, module in sys.modules.items()
        if module is not None and "." not in name and _module_dir(module) == folder
    }
    return {
        name: module
        for name, module in sys.modules.items()
        if module is not None and name.partition(".")[0] in roots
    }


@contextlib.contextmanager
def import_from_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, ``import x`` finds ``x`` in ``path`` first, even when a module ``x``
    from the current directory is already imported; afterwards the modules imported from
    ``path`` are forgotten and the earlier ones are back::

        import model_def as new_model_def

        with det.import_from_path(checkpoint_dir / "code"):
            import model_def as old_model_def

    No ``__pycache__`` is written into ``path`` (a checkpoint stays as it was).

    Raises:
        RuntimeError: called while another ``import_from_path`` block is open (nested, or from
            another thread): the import system is process-wide, so blocks cannot overlap.
    """
    if not _active.acquire(blocking=False):
        raise RuntimeError(
            "det.import_from_path blocks cannot be nested or open in two threads at once: "
            "finish one block before starting the next"
        )
    folder = os.path.abspath(os.fspath(path))
    cwd = os.getcwd()
    saved_path = list(sys.path)
    saved_bytecode = sys.dont_write_bytecode
    # Modules from the current directory would shadow same-named ones in ``path``.
    hidden: dict[str, ModuleType] = {}
    if "" in sys.path or cwd in sys.path:
        hidden = _modules_from(cwd)
        for name in hidden:
            del sys.modules[name]
    sys.path[:] = [folder] + [p for p in sys.path if p not in ("", cwd)]
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        for name in _modules_from(folder):
            del sys.modules[name]
        sys.path[:] = saved_path
        sys.dont_write_bytecode = saved_bytecode
        sys.modules.update(hidden)
        _active.release()
