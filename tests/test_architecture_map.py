"""docs/architecture.md's module map matches the tree: one table per package of `determined/`,
one row per module or sub-package in it, no row for a module that is not there."""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
PACKAGE_HEADING = re.compile(r"^### `(determined(?:\.[\w]+)*)`\s*$")
ROW = re.compile(r"^\| `([\w]+/?)` \|")


def documented(text: str) -> dict[str, set[str]]:
    """{package: the names in the first column of its table} from the module-map section."""
    section = text.split("\n## Module map\n", 1)[1]
    tables: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in section.splitlines():
        if m := PACKAGE_HEADING.match(line):
            current = tables.setdefault(m.group(1), set())
        elif line.startswith("#"):
            current = None
        elif current is not None and (m := ROW.match(line)):
            current.add(m.group(1))
    return tables


def on_disk(root: pathlib.Path) -> dict[str, tuple[set[str], set[str]]]:
    """{package: (modules and sub-packages that must be listed, other folders that may be)}.
    Alembic's revision files are data, not modules: ``versions/`` is listed, not its contents."""
    packages: dict[str, tuple[set[str], set[str]]] = {}
    for init in sorted(root.rglob("__init__.py")):
        pkg = init.parent
        if "versions" in pkg.relative_to(root).parts:
            continue
        required: set[str] = set()
        optional: set[str] = set()
        for child in pkg.iterdir():
            if child.is_dir() and child.name != "__pycache__":
                (required if (child / "__init__.py").exists() else optional).add(child.name + "/")
            elif child.suffix == ".py" and child.name != "__init__.py":
                required.add(child.stem)
        name = ".".join(pkg.relative_to(root.parent).parts)
        packages[name] = (required, optional)
    return packages


def test_every_package_and_module_is_on_the_map() -> None:
    tables = documented(DOC.read_text())
    packages = on_disk(REPO / "determined")
    problems = [f"{p}: no table (add a '### `{p}`' heading)" for p in packages if p not in tables]
    problems += [f"{p}: a table for no package" for p in tables if p not in packages]
    for pkg, (required, optional) in packages.items():
        rows = tables.get(pkg, set())
        problems += [f"{pkg}: `{m}` is not on the map" for m in sorted(required - rows)]
        stale = sorted(rows - required - optional)
        problems += [f"{pkg}: `{m}` is on the map but not on disk" for m in stale]
    assert not problems, "docs/architecture.md's module map is out of date:\n" + "\n".join(problems)


def test_the_check_sees_a_missing_and_a_stale_module(tmp_path: pathlib.Path) -> None:
    pkg = tmp_path / "determined" / "thing"
    pkg.mkdir(parents=True)
    (tmp_path / "determined" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_kept.py").write_text("")
    (pkg / "_new.py").write_text("")
    doc = (
        "## Module map\n\n### `determined`\n\n| module | holds |\n| --- | --- |\n"
        "| `thing/` | x |\n\n### `determined.thing`\n\n| module | holds |\n| --- | --- |\n"
        "| `_kept` | x |\n| `_gone` | x |\n"
    )
    tables = documented("\n" + doc)
    packages = on_disk(tmp_path / "determined")
    assert tables == {"determined": {"thing/"}, "determined.thing": {"_kept", "_gone"}}
    required, _ = packages["determined.thing"]
    assert required - tables["determined.thing"] == {"_new"}
    assert tables["determined.thing"] - required == {"_gone"}


@pytest.mark.parametrize("heading", ["### `determined.nope`", "### `determined`"])
def test_headings_parse(heading: str) -> None:
    assert PACKAGE_HEADING.match(heading)
