"""No import cycles inside ``determined/``, no import against its layers, no module setting
another module's attributes.

Every module is parsed with ``ast``; its imports of other ``determined`` modules (absolute and
relative, ``from pkg import sub`` counted as an import of the submodule ``sub``) make the edges
of a graph, whose strongly connected components (Tarjan) must all be single modules. What
counts:

* Imports anywhere in a module, functions included: an import moved into a function to dodge
  a cycle still ties the two modules together (each needs the other to work), so it is a cycle
  too. Lazy imports that are no cycle (of a heavy sub-package from the CLI, say) are fine.
* Imports under ``if TYPE_CHECKING:`` are left out: they never run.
* ``import a.b.c`` runs ``a/__init__``, ``a/b/__init__`` and ``a.b.c``; the edge goes to
  ``a.b.c`` only. A package's ``__init__`` re-exporting its own submodules is the normal shape
  of a package, not a cycle: edges from a module to a package it sits inside (its ancestors)
  are dropped, since importing a submodule has already started its parent's ``__init__``.
  Every other edge to a package goes to its ``__init__``.

The layers (``LAYERS``, as docs/architecture.md draws them) are checked on the same edges, so
an import inside a function counts as much as one at the top of a module: a part imports only
parts of lower layers, never a higher layer's nor another part of its own layer (the CLI and
the master are peers: the CLI starts the master as a process and talks to it over HTTP).

A module that assigns to an attribute of another ``determined`` module (``_trial.Experiment =
Experiment``) ties the two together as an import would, where no import shows it: refused.
"""

from __future__ import annotations

import ast
import functools
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
ROOT = "determined"


def module_names(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """{dotted module name: file}; a package is named by its ``__init__``."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``body`` and the blocks, functions and classes inside it,
    except those under ``if TYPE_CHECKING``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            found += _imports(node.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, None) or []:
                    if isinstance(child, ast.stmt):
                        found += _imports([child])
                    else:  # an except handler or a match case: statements in its body
                        found += _imports(child.body)
    return found


@functools.cache
def _parsed(path: pathlib.Path) -> ast.Module:
    """A module's tree, parsed once for the three checks (nothing here changes a tree)."""
    return ast.parse(path.read_text(), str(path))


def imports_of(name: str, path: pathlib.Path, modules: set[str]) -> set[str]:
    """The ``determined`` modules that ``name`` (at ``path``) imports."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(_parsed(path).body):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            targets.add(sub if sub in modules else source)
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {t for t in targets if t in modules and t != name and t not in ancestors}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def graph_of(root: pathlib.Path) -> dict[str, set[str]]:
    modules = module_names(root)
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


# Lowest first. Parts not named here (the package's top-level modules, launch, layers, the
# integrations) are not checked by this list; the cycle check still covers them.
LAYERS = [
    ["determined.common"],
    ["determined.tensorboard"],
    ["determined.core"],
    ["determined.pytorch", "determined.experimental"],
    ["determined.exec", "determined.searcher"],
    ["determined.cli", "determined.master"],
]


def _part(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    """The layer and part of ``module``, if a listed part holds it."""
    for rank, parts in enumerate(layers):
        for part in parts:
            if module == part or module.startswith(part + "."):
                return rank, part
    return None


def against_layers(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """``a -> b`` for each import of a higher layer, or of another part of the same layer."""
    found = []
    for module in sorted(graph):
        source = _part(module, layers)
        if source is None:
            continue
        for target in sorted(graph[module]):
            dest = _part(target, layers)
            if dest is not None and dest[1] != source[1] and dest[0] >= source[0]:
                found.append(f"{module} -> {target}")
    return found


def foreign_assignments(root: pathlib.Path) -> list[str]:
    """``module: line: target`` for each assignment to an attribute of an imported
    ``determined`` module (``import a.b as m`` / ``from a import b``, then ``m.x = ...``).
    A package's own submodule setting the package's names (core_v2's singletons) is the
    package at work, as the import graph's ancestor rule has it."""
    modules = module_names(root)
    found = []
    for name, path in modules.items():
        tree = _parsed(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        bound = set()
        for node in _imports(tree.body):
            for alias in node.names:
                if isinstance(node, ast.Import):
                    if alias.asname and alias.name in modules and alias.name not in ancestors:
                        bound.add(alias.asname)
                    continue
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                target = f"{source}.{alias.name}"
                if target in modules and target not in ancestors:
                    bound.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id in bound
                ):
                    found.append(f"{name}: {t.lineno}: {t.value.id}.{t.attr}")
    return found


def test_no_import_against_the_layers() -> None:
    found = against_layers(graph_of(REPO / ROOT), LAYERS)
    assert not found, (
        "imports of a higher layer or a sibling part (move the shared piece down, or reach "
        "the other side over HTTP or as a process; an import inside a function counts too):\n"
        + "\n".join(found)
    )


def test_no_module_sets_another_modules_attributes() -> None:
    found = foreign_assignments(REPO / ROOT)
    assert not found, (
        "modules setting another module's attributes (a hidden import: import the name where "
        "it is defined, or move it down):\n" + "\n".join(found)
    )


def test_no_import_cycles_in_determined() -> None:
    graph = graph_of(REPO / ROOT)
    found = cycles(graph)
    report = []
    for component in found:
        members = set(component)
        edges = [f"    {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
        report.append(" <-> ".join(component) + "\n" + "\n".join(edges))
    assert not found, (
        "import cycles (break each by moving the shared piece into a module both can import; "
        "an import inside a function does not break one):\n" + "\n".join(report)
    )


def _write(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_check_finds_cycles_and_ignores_what_never_runs(tmp_path: pathlib.Path) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import a, b\nfrom pkg.sub import c\n",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "from . import a\n",
            "pkg/sub/__init__.py": "from .c import C\n",
            "pkg/sub/c.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import d\n"
                "def f():\n    from pkg import a\n"
            ),
            "pkg/sub/d.py": "import pkg.sub.c\n",
        },
    )
    graph = graph_of(root)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.sub.c"] == {"pkg.a"}  # the function's import; not the TYPE_CHECKING one
    assert graph["pkg.sub"] == {"pkg.sub.c"}
    assert graph["pkg.sub.d"] == {"pkg.sub.c"}
    # The package __init__ re-exporting its submodules is no cycle; a <-> b is.
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_a_long_cycle_is_one_component(tmp_path: pathlib.Path) -> None:
    n = 30
    files = {"pkg/__init__.py": ""}
    files |= {f"pkg/m{i}.py": f"from pkg import m{(i + 1) % n}\n" for i in range(n)}
    assert cycles(graph_of(_write(tmp_path, files))) == [sorted(f"pkg.m{i}" for i in range(n))]


def test_the_layer_check_sees_imports_at_module_level_and_in_functions(
    tmp_path: pathlib.Path,
) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "def f():\n    from pkg.high import b\n",  # upward, in a function
            "pkg/low/c.py": "from pkg.low import a\n",  # its own part
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "from pkg.low import c\nimport pkg.peer.d\n",  # down; sideways
            "pkg/peer/__init__.py": "",
            "pkg/peer/d.py": "from pkg.high.b import x\n",  # sideways, module level
        },
    )
    layers = [["pkg.low"], ["pkg.high", "pkg.peer"]]
    assert against_layers(graph_of(root), layers) == [
        "pkg.high.b -> pkg.peer.d",
        "pkg.low.a -> pkg.high.b",
        "pkg.peer.d -> pkg.high.b",
    ]


def test_the_check_finds_a_module_setting_anothers_attribute(tmp_path: pathlib.Path) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "x = None\n",
            "pkg/b.py": "from pkg import a\nclass B: ...\na.x = B\nB.y = 1\n",
            "pkg/c.py": "import pkg.a as m\ndef f():\n    m.x += 1\n",
            "pkg/sub/__init__.py": "y = None\n",
            "pkg/sub/e.py": "def f():\n    from pkg import sub\n    sub.y = 1\n",  # its package
        },
    )
    assert foreign_assignments(root) == ["pkg.b: 3: a.x", "pkg.c: 3: m.x"]
