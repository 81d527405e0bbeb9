"""The model definition sent with a new experiment (``det e create``, the SDK's
``create_experiment``): a directory as a list of ``v1File``.

Each entry is ``{path, type, content (base64), mode, mtime, uid, gid}`` with ``type`` the tar
type byte (``ord("0")`` file, ``ord("5")`` directory), as 0.37 sends it. Paths matching
``.detignore`` (or 0.37's defaults: ``__pycache__/``, ``*.py[co]``, ...) are left out.
``includes`` (the SDK's) add more files or directories at the top level, under their names.
"""

from __future__ import annotations

import base64
import os
import pathlib
import tarfile
from collections.abc import Iterable
from typing import Any

from determined.common._detignore import Ignore

MAX_CONTEXT_BYTES = 95 * 1024 * 1024  # 0.37's limit: 96 MiB encoded, less 1 MiB


class ContextError(ValueError):
    """The model definition cannot be sent as asked (the message says why)."""


def _sizeof(num: float) -> str:
    for unit in ("", "K", "M", "G", "T", "P"):
        if abs(num) < 1024.0:
            return f"{num:.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}EB"


def _entry(rel: str, path: pathlib.Path, is_dir: bool) -> dict[str, Any]:
    st = path.stat()
    content = "" if is_dir else base64.b64encode(path.read_bytes()).decode()
    kind = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    return {
        "path": rel,
        "type": ord(kind),
        "content": content,
        "mtime": str(int(st.st_mtime)),
        "mode": st.st_mode,
        "uid": 0,
        "gid": 0,
    }


def _walk(root: pathlib.Path, prefix: str) -> list[dict[str, Any]]:
    ignore = Ignore.for_root(root)
    items: list[dict[str, Any]] = []
    for parent, dirs, files in os.walk(root):
        base = pathlib.Path(parent)
        rel_base = base.relative_to(root).as_posix()
        inner = "" if rel_base == "." else rel_base + "/"
        dirs[:] = sorted(d for d in dirs if not ignore.match(inner + d, True))
        for d in dirs:
            items.append(_entry(prefix + inner + d, base / d, True))
        for f in sorted(files):
            if f == ".detignore" or ignore.match(inner + f, False):
                continue
            items.append(_entry(prefix + inner + f, base / f, False))
    return items


def read_context(
    root: pathlib.Path | None, includes: Iterable[pathlib.Path] = ()
) -> list[dict[str, Any]]:
    """The files under ``root`` (relative paths, sorted), minus ignored ones, then each of
    ``includes`` (a file as its name, a directory as ``<name>/...``).

    Raises:
        ContextError: ``root`` is missing or not a directory, an include is missing or its
            name is taken, or the files exceed the size limit.
    """
    items: list[dict[str, Any]] = []
    if root is not None:
        if not root.exists():
            raise ContextError(f"model definition directory {str(root)!r} does not exist")
        if not root.is_dir():
            raise ContextError(f"model definition {str(root)!r} must be a directory")
        items = _walk(root.resolve(), "")
    taken = {i["path"].split("/")[0] for i in items}
    for inc in includes:
        inc = pathlib.Path(inc)
        if not inc.exists():
            raise ContextError(f"include {str(inc)!r} does not exist")
        name = inc.resolve().name
        if name in taken:
            raise ContextError(f"include {str(inc)!r}: {name!r} is already in the model definition")
        taken.add(name)
        if inc.is_dir():
            items.append(_entry(name, inc, True))
            items += _walk(inc.resolve(), name + "/")
        else:
            items.append(_entry(name, inc, False))
    size = sum(len(i["content"]) for i in items)
    if size > MAX_CONTEXT_BYTES:
        raise ContextError(
            f"the model definition is larger than {_sizeof(MAX_CONTEXT_BYTES)}; list data and "
            "outputs in .detignore to leave them out"
        )
    return items
