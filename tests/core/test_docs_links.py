"""Every relative link in README.md and the Core API docs (docs/core.md, docs/core/) points at a
file or directory that exists."""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = [
    REPO / "README.md",
    REPO / "docs" / "core.md",
    *sorted((REPO / "docs" / "core").glob("*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(page: pathlib.Path) -> list[str]:
    links = [m.group(1).split("#")[0] for m in LINK.finditer(page.read_text())]
    return [link for link in links if link and not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: pathlib.Path) -> None:
    links = _relative_links(page)
    missing = [link for link in links if not (page.parent / link).exists()]
    assert missing == [], f"{page.relative_to(REPO)} links to missing {missing}"


def test_the_readme_tour_links_the_core_docs() -> None:
    assert "docs/core.md" in _relative_links(REPO / "README.md")
