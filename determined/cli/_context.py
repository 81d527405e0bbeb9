"""The model definition sent with ``det e create``: a directory as a list of ``v1File``.

Each entry is ``{path, type, content (base64), mode, mtime, uid, gid}`` with ``type`` the tar
type byte (``ord("0")`` file, ``ord("5")`` directory), as the reference sends it. Paths matching
``.detignore`` (or the reference's defaults: ``__pycache__/``, ``*.py[co]``, ...) are left out.
"""

from __future__ import annotations

import base64
import collections
import os
import pathlib
import tarfile
from collections.abc import Sequence
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


def read_context(
    root: pathlib.Path | None, includes: Sequence[pathlib.Path] = ()
) -> list[dict[str, Any]]:
    """The files under ``root`` (relative paths, sorted), minus ignored ones, then each of
    ``includes`` (``det e create -i``: a file or directory) under its own base name.

    Raises:
        CliError: ``root`` is missing or not a directory, an include is missing or collides
            with another top-level name, or the files exceed the size limit.
    """
    if root is not None:
        if not root.exists():
            raise _render.CliError(f"model definition directory {str(root)!r} does not exist")
        if not root.is_dir():
            raise _render.CliError(
                f"model definition {str(root)!r} must be a directory; "
                "add a single file with -i/--include instead"
            )
    total = _Total()
    items = [] if root is None else _walk(root.resolve(), "", total)
    for path in includes:
        if not path.exists():
            raise _render.CliError(f"include {str(path)!r} does not exist")
        name = path.resolve().name
        if not name:
            raise _render.CliError(f"include {str(path)!r} has no name to place it under")
        if path.is_dir():
            items.append(_entry(name, path, True))
            items += _walk(path.resolve(), name + "/", total)
        else:
            items.append(total.add(_entry(name, path, False), path))
    top = collections.Counter(i["path"] for i in items if "/" not in i["path"])
    clashes = sorted(k for k, n in top.items() if n > 1)
    if clashes:
        raise _render.CliError(
            f"duplicate path {clashes[0]!r} in the model definition and its includes; "
            "rename one of them"
        )
    return items


class _Total:
    """The running size of the encoded files, checked against the reference's limit."""

    def __init__(self) -> None:
        self.size = 0

    def add(self, item: dict[str, Any], where: pathlib.Path) -> dict[str, Any]:
        self.size += len(item["content"])
        if self.size > MAX_CONTEXT_BYTES:
            raise _render.CliError(
                f"the model definition with {where} is larger than "
                f"{_render.sizeof_fmt(MAX_CONTEXT_BYTES)}; list data and outputs in "
                ".detignore to leave them out"
            )
        return item


def _walk(root: pathlib.Path, top: str, total: _Total) -> list[dict[str, Any]]:
    """The entries under directory ``root``, their paths prefixed by ``top``, minus what the
    directory's own ``.detignore`` (and the defaults) leave out."""
    ignore = Ignore.for_root(root)
    items: list[dict[str, Any]] = []
    for parent, dirs, files in os.walk(root):
        base = pathlib.Path(parent)
        rel_base = base.relative_to(root).as_posix()
        prefix = "" if rel_base == "." else rel_base + "/"
        dirs[:] = sorted(d for d in dirs if not ignore.match(prefix + d, True))
        for d in dirs:
            items.append(_entry(top + prefix + d, base / d, True))
        for f in sorted(files):
            if f == ".detignore" or ignore.match(prefix + f, False):
                continue
            items.append(total.add(_entry(top + prefix + f, base / f, False), root))
    return items
