"""The package's layout: no import circle anywhere in ``python/ttlpolicy/``, and no module
outside the package's top level reaching into its private modules.

Static: every ``.py`` file is parsed (nothing is imported), its imports resolved to modules of
the package, and the graph searched for cycles.  Every import statement counts, those inside
functions too: a deferred import hides a circle from the interpreter but not from a reader
(``trace_cache`` ↔ ``sim.workload`` was one, each side deferred).  Imports under ``if
TYPE_CHECKING:`` do not count: they never run, and type hints may name each other.  Importing
a module's parent package (``from .. import native``) is an edge to the package's
``__init__``; the implicit load of the parents that every import does is not (a package that
imports its own submodules is no circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ttlpolicy

ROOT = Path(ttlpolicy.__file__).parent
#: The top level's private modules (``_backend``, ``_validate``, ``_native``) may be imported
#: by the top level's own modules and by the subpackages that ``ttlpolicy/__init__`` imports
#: (the reference, group TTLs: they cannot import the package they are part of).
PRIVATE_OK = {"reference", "groups"}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return out


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                start = ".".join(base + ([node.module] if node.module else []))
            else:
                start = node.module or ""
            # ``from X import Y``: the module X.Y where Y is one, else X itself
            targets = [f"{start}.{a.name}" if f"{start}.{a.name}" in known else start
                       for a in node.names]  # fmt: skip
        for target in targets:
            # ``import a.b.c`` of a non-module attribute path: its longest module prefix
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    # extension modules (``_native``, known by their stub) import nothing of the package
    native = {module_name(p, root) for p in root.rglob("*.pyi")} - set(mods)
    known = set(mods) | native
    return {name: imported(name, path, known) for name, path in mods.items()} | {
        name: set() for name in native
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # (the package's graph is shallow: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_in_the_package():
    assert cycles(graph()) == []


def test_no_private_reach_in():
    """A subsystem (``sim``, ``plan``, ``cli``, ``traces``) uses the package's public names
    (``ttlpolicy.native``, ``ttlpolicy.backend``), not its private modules."""
    edges = graph()
    bad = []
    for name, path in modules().items():
        folder = path.relative_to(ROOT).parts[:-1]  # () for a top-level module
        if not folder or folder[0] in PRIVATE_OK:
            continue
        bad += [f"{name} -> {t}" for t in edges[name] if t.count(".") == 1 and "._" in t]
    assert bad == []


@pytest.mark.parametrize(
    ("files", "circle"),
    [
        ({"a.py": "from . import b", "b.py": "def f():\n    from .a import x"}, ["pkg.a", "pkg.b"]),
        ({"a.py": "import pkg.sub.c", "sub/__init__.py": "", "sub/c.py": "from ..a import y"},
         ["pkg.a", "pkg.sub.c"]),
        ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import T",
          "b.py": "from .a import x"}, None),
        ({"__init__.py": "from .a import x", "a.py": "from .b import y", "b.py": "import os"},
         None),
    ],
)  # fmt: skip
def test_the_check_finds_a_circle(tmp_path, files, circle):
    """Deferred and absolute imports close a circle; type-checking imports and a package that
    imports its submodules do not."""
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert cycles(graph(root)) == ([circle] if circle else [])
