"""The model definition sent with ``det e create``: a directory as a list of ``v1File``.

Each entry is ``{path, type, content (base64), mode, mtime, uid, gid}`` with ``type`` the tar
type byte (``ord("0")`` file, ``ord("5")`` directory), as the reference sends it. Paths matching
``.detignore`` (or the reference's defaults: ``__pycache__/``, ``*.py[co]``, ...) are left out.
"""

from __future__ import annotations

import base64
import os
import pathlib
import tarfile
from typing import Any

from determined.cli import _render
from determined.common._detignore import Ignore

MAX_CONTEXT_BYTES = 95 * 1024 * 1024  # the reference's limit: 96 MiB encoded, less 1 MiB


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


def read_context(root: pathlib.Path | None) -> list[dict[str, Any]]:
    """The files under ``root`` (relative paths, sorted), minus ignored ones.

    Raises:
        CliError: ``root`` is missing or not a directory, or the files exceed the size limit.
    """
    if root is None:
        return []
    if not root.exists():
        raise _render.CliError(f"model definition directory {str(root)!r} does not exist")
    if not root.is_dir():
        raise _render.CliError(f"model definition {str(root)!r} must be a directory")
    root = root.resolve()
    ignore = Ignore.for_root(root)
    items: list[dict[str, Any]] = []
    size = 0
    for parent, dirs, files in os.walk(root):
        base = pathlib.Path(parent)
        rel_base = base.relative_to(root).as_posix()
        prefix = "" if rel_base == "." else rel_base + "/"
        dirs[:] = sorted(d for d in dirs if not ignore.match(prefix + d, True))
        for d in dirs:
            items.append(_entry(prefix + d, base / d, True))
        for f in sorted(files):
            if f == ".detignore" or ignore.match(prefix + f, False):
                continue
            item = _entry(prefix + f, base / f, False)
            size += len(item["content"])
            if size > MAX_CONTEXT_BYTES:
                raise _render.CliError(
                    f"the model definition in {root} is larger than "
                    f"{_render.sizeof_fmt(MAX_CONTEXT_BYTES)}; list data and outputs in "
                    ".detignore to leave them out"
                )
            items.append(item)
    return items
