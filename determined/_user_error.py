"""One line that names a failure's cause in the user's own code: the exception and the file,
line and function of the innermost frame outside Python, its installed packages and this
package. A trial logs it at ERROR level, so ``det e create -f`` and ``det t logs`` can put it
first instead of leaving it under a launcher's failure report."""

from __future__ import annotations

import os
import sysconfig
import traceback

_LIBRARY_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {
        *(sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        os.path.dirname(os.path.abspath(__file__)),  # determined itself
    }
    if p
)


def is_library_path(path: str) -> bool:
    """Whether a traceback's file is Python's, an installed package's or this package's (not
    the user's)."""
    if path.startswith("<"):  # <frozen runpy>, <string>, <stdin>
        return True
    if "site-packages" in path.split(os.sep) or "dist-packages" in path.split(os.sep):
        return True
    return os.path.realpath(path).startswith(_LIBRARY_DIRS)


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc`` (or of the exception it was raised from, for a wrapped
    import error) in the user's code, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = traceback.extract_tb(current.__traceback__)
        if isinstance(current, SyntaxError) and current.filename:
            return traceback.FrameSummary(current.filename, current.lineno or 0, "<module>")
        for frame in reversed(frames):
            if not is_library_path(frame.filename):
                return frame
        current = current.__cause__ or current.__context__
    return None


def location(exc: BaseException) -> str:
    """`` (at file:line in function)`` for :func:`user_frame`, or "" without one; the file
    relative to the working directory when it lies below it."""
    frame = user_frame(exc)
    if frame is None:
        return ""
    path = os.path.relpath(frame.filename)
    if path.startswith(os.pardir):
        path = frame.filename
    return f" (at {path}:{frame.lineno} in {frame.name})"


def describe(exc: BaseException) -> str:
    """``Type: message (at file:line in function)``."""
    return f"{type(exc).__name__}: {exc}".rstrip(": ") + location(exc)
