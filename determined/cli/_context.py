"""The model definition sent with ``det e create`` (``determined.common._context``, shared
with the SDK), with its errors as ``CliError``."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

from determined.cli import _render
from determined.common import _context

MAX_CONTEXT_BYTES = _context.MAX_CONTEXT_BYTES


def read_context(
    root: pathlib.Path | None, includes: Sequence[pathlib.Path] = ()
) -> list[dict[str, Any]]:
    """The files under ``root``, then ``includes`` (``det e create -i``), see
    ``determined.common._context.read_context``.

    Raises:
        CliError: ``root`` is missing or not a directory, or the files exceed the size limit.
    """
    try:
        return _context.read_context(root, includes)
    except _context.ContextError as e:
        raise _render.CliError(str(e)) from None
