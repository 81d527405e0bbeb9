"""The ``modelDefinition`` of ``POST /api/v1/experiments``: a list of ``v1File`` entries
(``{path, type, content (base64), mode, mtime}``, as ``det e create`` and the reference CLI send
them) checked entry by entry and packed into the tar.gz a trial unpacks.

Every field is checked here, at create time, so that an entry no trial could unpack (an
``mtime`` past what a file system stores, bad base64) is a 400 naming the entry, never an error
inside the resource manager at launch.
"""

from __future__ import annotations

import base64
import binascii
import io
import tarfile
from typing import Any

from determined.master._errors import InvalidArgument

MAX_MODEL_DEF_BYTES = 96 * 1024 * 1024
# ustar's 11 octal digits: up to the year 2242, and within every platform's time_t.
MAX_MTIME = 8**11 - 1
MAX_MODE = 0o177777  # st_mode: permission bits and the file type bits (masked off)
_DIR_TYPES = ("53", "5", "TYPE_DIR")  # ord("5"), as sent; the tar type byte; the enum name


def tar_model_definition(files: list[Any]) -> bytes:
    """The checked entries as one tar.gz.

    Raises:
        InvalidArgument: an entry that is not a mapping, with a path that is not relative, an
            ``mtime`` or ``mode`` that is not an integer in range, or ``content`` that is not
            base64 text; or an archive over :data:`MAX_MODEL_DEF_BYTES`.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i, entry in enumerate(files):
            info, data = _entry(i, entry)
            tar.addfile(info, None if data is None else io.BytesIO(data))
    out = buf.getvalue()
    if len(out) > MAX_MODEL_DEF_BYTES:
        raise InvalidArgument(
            f"the model definition is {len(out)} bytes compressed; the limit is "
            f"{MAX_MODEL_DEF_BYTES}: move data sets out of the model directory or list them "
            "in .detignore"
        )
    return out


def _entry(i: int, entry: Any) -> tuple[tarfile.TarInfo, bytes | None]:
    if not isinstance(entry, dict):
        raise InvalidArgument(f"modelDefinition[{i}] must be an object {{path, content, ...}}")
    path = entry.get("path")
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidArgument(f"modelDefinition[{i}]: path {path!r} must be a non-empty string")
    if path.startswith("/") or ".." in path.split("/"):
        raise InvalidArgument(f"model definition path {path!r} must be relative")
    info = tarfile.TarInfo(path)
    info.mode = _integer(entry, "mode", 0o644, MAX_MODE, path) & 0o7777
    info.mtime = _integer(entry, "mtime", 0, MAX_MTIME, path)
    if str(entry.get("type")) in _DIR_TYPES or path.endswith("/"):
        info.type = tarfile.DIRTYPE
        return info, None
    content = entry.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise InvalidArgument(f"model definition {path!r}: content must be a base64 string")
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidArgument(f"model definition {path!r}: content is not base64: {e}") from e
    info.size = len(data)
    return info, data


def _integer(entry: dict[str, Any], key: str, default: int, top: int, path: str) -> int:
    """An integer field (the wire sends int64 as strings too) in ``0..top``."""
    raw = entry.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = -1 if isinstance(raw, bool) else int(raw)
    except (TypeError, ValueError, OverflowError):  # "soon", a list, inf
        value = -1
    if not 0 <= value <= top:
        raise InvalidArgument(
            f"model definition {path!r}: {key} {raw!r} must be an integer from 0 to {top}"
        )
    return value
