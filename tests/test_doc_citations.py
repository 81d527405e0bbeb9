"""Every path that a doc page, a comment or a docstring names exists, and every citation of the
behavioural reference (``docs/reference/harness.md``, ``docs/reference/master.md``) names a
section or a numbered item that exists there.

Scanned: ``README.md``, the ``.md`` pages under ``docs/``, and the ``.py``, ``.md`` and ``.sh``
files under ``determined/``, ``tests/``, ``benchmarks/``, ``examples/`` and ``scripts/``.
One test per file, so a failure names the file; its message lists ``line: problem``.

What each file is checked for:

1. Markdown links (``.md`` files): a relative target resolves from the page's folder. URLs and
   in-page anchors are not checked.
2. Repo-relative paths written out (``docs/...``, ``determined/...``, ``tests/...``,
   ``benchmarks/...``, ``examples/...``, ``scripts/...``, and top-level ``*.md`` files) exist.
3. Citations use the form ``docs/reference/master.md §4.3`` or ``docs/reference/harness.md §19
   item 45``; the retired forms (a ``spec/`` path, or "spec", "harness" or "master" right
   before a section sign) fail.
4. Each section sign names a section, subsection or numbered item of the reference file it
   cites: the one named last before it in the file. A bare ``§7`` further down a file thus
   continues the last reference named above it; one with no reference named above it fails.
   Inside a reference file, a bare section sign means that file unless the other one is named
   earlier on the same line.

The reference files' own numbering is pinned as well, since code cites it by number.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = REPO / "docs" / "reference"
SCANNED_TREES = ("determined", "tests", "benchmarks", "examples", "scripts")

_MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
_URL_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")
# A path starts at a word boundary that is not inside a longer path (`/run/determined/...`).
_REPO_PATH = re.compile(
    r"(?<![\w./~-])((?:docs|determined|tests|benchmarks|examples|scripts)/[\w.-]+(?:/[\w.-]+)*/?)"
)
# What a written-out path may name: source and doc files, or a folder (no suffix).
_REPO_FILE_TYPES = {"", ".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".json", ".txt", ".png"}
_TOP_LEVEL_MD = re.compile(r"(?<![\w./~-])([A-Z][A-Z0-9_]*\.md)\b")
_RETIRED = re.compile(
    r"(?i)(?<![\w/])spec/(?:harness|master)\.md|\bspec\s*§|\b(?:harness|master)(?:\s+spec)?\s+§"
)
_REFERENCE_NAME = re.compile(r"(?<![\w./-])docs/reference/(harness|master)\.md")
# A section sign, a subsection number, and a list of items ("item 45", "items 1–3 and 25–50").
_SECTION_SIGN = re.compile(
    r"§(\d+)(?:\.(\d+))?(?:\s+items?\s+(\d+(?:(?:\s*[-–,]\s*|\s+and\s+)\d+)*))?"
)
_HEADING = re.compile(r"^#{2,3}\s+(\d+)(?:\.(\d+))?\.?\s")
_NUMBERED_ITEM = re.compile(r"^(\d+)\.\s")


def _scanned_files() -> list[pathlib.Path]:
    files = [REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").rglob("*.md")]
    for tree in SCANNED_TREES:
        for pattern in ("*.py", "*.md", "*.sh"):
            files.extend((REPO / tree).rglob(pattern))
    # This file is left out: its self-test holds deliberately broken examples.
    return sorted(
        f
        for f in set(files) - {pathlib.Path(__file__).resolve()}
        if not any(p.startswith((".", "__pycache__")) for p in f.relative_to(REPO).parts)
    )


class _Outline:
    """The numbering of one reference file: its (section, subsection) headings and, per
    top-level section, the numbers of its unindented numbered items."""

    def __init__(self, text: str) -> None:
        self.headings: set[tuple[int, int | None]] = set()
        self.items: dict[int, set[int]] = {}
        section: int | None = None
        for line in text.splitlines():
            heading = _HEADING.match(line)
            if heading:
                number, sub = int(heading.group(1)), heading.group(2)
                self.headings.add((number, int(sub) if sub else None))
                section = number
                self.items.setdefault(number, set())
            elif line.startswith("## "):
                section = None  # an unnumbered section (the preface)
            elif section is not None and (item := _NUMBERED_ITEM.match(line)):
                self.items[section].add(int(item.group(1)))

    def missing(self, section: int, sub: int | None, items: list[int]) -> str | None:
        name = f"§{section}" + (f".{sub}" if sub is not None else "")
        if (section, sub) not in self.headings:
            return name
        absent = [i for i in items if i not in self.items.get(section, set())]
        return f"{name} item {', '.join(map(str, absent))}" if absent else None


_OUTLINES = {
    name: _Outline((REFERENCE / f"{name}.md").read_text()) for name in ("harness", "master")
}


def _item_numbers(listing: str | None) -> list[int]:
    """``"14-18, 21 and 22"`` -> ``[14, 15, 16, 17, 18, 21, 22]``."""
    numbers: list[int] = []
    for part in re.split(r"\s*,\s*|\s+and\s+", listing or ""):
        if part:
            bounds = [int(b) for b in re.split(r"\s*[-–]\s*", part)]
            numbers.extend(range(bounds[0], bounds[-1] + 1))
    return numbers


def _citation_problems(path: pathlib.Path, text: str) -> Iterator[tuple[int, str]]:
    own = path.stem if path.parent == REFERENCE else None
    current = own
    for lineno, line in enumerate(text.splitlines(), 1):
        if own:
            current = own
        for retired in _RETIRED.finditer(line):
            yield (
                lineno,
                f"retired citation form {retired.group(0)!r}: write docs/reference/<file>.md §N",
            )
        events = [(m.start(), "name", m) for m in _REFERENCE_NAME.finditer(line)]
        events += [(m.start(), "sign", m) for m in _SECTION_SIGN.finditer(line)]
        for _, kind, match in sorted(events, key=lambda e: e[0]):
            if kind == "name":
                current = match.group(1)
                continue
            if current is None:
                yield lineno, f"{match.group(0)!r} cites no reference file (none is named above it)"
                continue
            sub = int(match.group(2)) if match.group(2) else None
            absent = _OUTLINES[current].missing(
                int(match.group(1)), sub, _item_numbers(match.group(3))
            )
            if absent:
                yield lineno, f"docs/reference/{current}.md has no {absent}"


def _path_problems(path: pathlib.Path, text: str) -> Iterator[tuple[int, str]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if path.suffix == ".md":
            for link in _MD_LINK.finditer(line):
                target = link.group(1).split("#")[0]
                if target and not _URL_SCHEME.match(target) and not (path.parent / target).exists():
                    yield lineno, f"link to missing {target}"
        for mention in _REPO_PATH.finditer(line):
            named = mention.group(1).rstrip(".-")
            if pathlib.PurePath(named).suffix not in _REPO_FILE_TYPES:
                continue  # e.g. determined/state_dict.pth: a file inside a checkpoint
            if not (REPO / named).exists():
                yield lineno, f"missing path {named}"
        for mention in _TOP_LEVEL_MD.finditer(line):
            named = mention.group(1)
            if not (REPO / named).exists() and not (path.parent / named).exists():
                yield lineno, f"missing path {named}"


@pytest.mark.parametrize("path", _scanned_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_named_paths_and_reference_citations_exist(path: pathlib.Path) -> None:
    text = path.read_text(encoding="utf-8")
    problems = sorted({*_path_problems(path, text), *_citation_problems(path, text)})
    listing = "\n".join(f"  {path.relative_to(REPO)}:{n}: {what}" for n, what in problems)
    assert not problems, f"{len(problems)} dangling path(s) or citation(s):\n{listing}"


def test_reference_numbering_is_stable() -> None:
    """Code cites these numbers; renumbering would silently change what every citation means."""
    harness, master = _OUTLINES["harness"], _OUTLINES["master"]
    assert harness.headings == {(n, None) for n in range(1, 20)}
    assert harness.items[19] == set(range(1, 79))
    subsections = {1: 11, 2: 5, 3: 2, 4: 7}
    assert master.headings == {(n, None) for n in range(1, 7)} | {
        (n, s) for n, count in subsections.items() for s in range(1, count + 1)
    }
    assert master.items[6] == set(range(1, 51))


def test_the_readme_tour_links_the_core_docs() -> None:
    links = [m.group(1) for m in _MD_LINK.finditer((REPO / "README.md").read_text())]
    assert "docs/core.md" in links


def test_the_checks_report_each_kind_of_problem() -> None:
    page = REPO / "docs" / "page.md"
    text = "\n".join(
        [
            "See [here](missing.md), [ok](core.md), [web](https://x.org/a.md) and `tests/nope.py`.",
            "Bare §4 before any reference; then docs/reference/master.md §4.3 and §6 items 49-51.",
            "Old forms: spec/master.md §4.1, spec §2, harness §7.",
            "docs/reference/harness.md §19 item 78, §12, §20; a checkpoint's determined/x.pth.",
        ]
    )
    problems = sorted({*_path_problems(page, text), *_citation_problems(page, text)})
    retired = ": write docs/reference/<file>.md §N"
    assert problems == [
        (1, "link to missing missing.md"),
        (1, "missing path tests/nope.py"),
        (2, "'§4' cites no reference file (none is named above it)"),
        (2, "docs/reference/master.md has no §6 item 51"),
        (3, "docs/reference/master.md has no §7"),
        (3, "retired citation form 'harness §'" + retired),
        (3, "retired citation form 'spec §'" + retired),
        (3, "retired citation form 'spec/master.md'" + retired),
        (4, "docs/reference/harness.md has no §20"),
    ]
