"""Which files of a checkpoint a list of globs names (``det c rm --glob``, the SDK's
``Checkpoint.remove_files``).

A glob is matched against a path relative to the checkpoint's root, as ``pathlib``'s ``glob``
walks it: ``*``, ``?`` and ``[...]`` stay within one path segment, ``**`` spans any number of
segments (``**/*`` is everything). A path is named when it or one of its parent directories
matches, so naming a directory removes what is in it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence


def glob_regex(glob: str) -> re.Pattern[str]:
    """The regular expression for one glob (a full match of a relative path, no trailing /)."""
    g, i, out = glob.strip("/"), 0, []
    while i < len(g):
        if g.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif g.startswith("**", i):
            out.append(".*")
            i += 2
        elif g[i] == "*":
            out.append("[^/]*")
            i += 1
        elif g[i] == "?":
            out.append("[^/]")
            i += 1
        elif g[i] == "[":
            # As fnmatch: a "]" right after "[" (or "[!") belongs to the set.
            start = i + 2 if g.startswith("[!", i) else i + 1
            end = g.find("]", start + 1)
            if end == -1:
                out.append(re.escape(g[i]))
                i += 1
                continue
            body = g[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            escaped = body.replace("\\", "\\\\").replace("^", "\\^")
            out.append(f"(?!/)[{'^' if negate else ''}{escaped}]")
            i = end + 1
        else:
            out.append(re.escape(g[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def matcher(globs: Sequence[str]) -> Callable[[str], bool]:
    """``named(rel)``: whether ``rel`` (a file, or a directory ending in ``/``) or one of its
    parent directories matches one of ``globs``."""
    patterns = [glob_regex(g) for g in globs if g.strip("/")]

    def named(rel: str) -> bool:
        parts = rel.strip("/").split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        return any(p.fullmatch(prefix) for p in patterns for prefix in prefixes)

    return named
