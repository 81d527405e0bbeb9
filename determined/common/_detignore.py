"""``.detignore``: which files of a model definition directory stay out of an experiment's
context (``det e create``) and of a checkpoint's ``code/`` copy."""

from __future__ import annotations

import pathlib

import pathspec

DEFAULT_DETIGNORE = (
    "__pycache__/",
    "*.py[co]",
    "*$py.class",
    "terraform",
    "terraform_data",
    "terraform.tfstate*",
    "terraform.tfvars*",
    ".terraform*",
)


class Ignore:
    """``.detignore`` (after the reference's defaults) with git's ignore rules, as 0.37 reads it
    (the same ``pathspec`` library): ``**``, negation with ``!``, ``dir/``, ``/anchored``,
    character classes; the last matching line wins. A directory that is ignored is not entered,
    so a file inside it cannot be brought back (as in git)."""

    def __init__(self, lines: list[str]) -> None:
        self._spec = pathspec.PathSpec.from_lines("gitignore", lines)

    @classmethod
    def for_root(cls, root: pathlib.Path) -> Ignore:
        lines = list(DEFAULT_DETIGNORE)
        path = root / ".detignore"
        if path.is_file():
            lines += path.read_text().splitlines()
        return cls(lines)

    def match(self, rel: str, is_dir: bool) -> bool:
        if is_dir and self._spec.match_file(rel + "/"):
            return True
        return bool(self._spec.match_file(rel))
