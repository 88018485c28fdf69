"""No private name crosses a package boundary outside the tests (static, like ``test_layout``).

A *private name* is an attribute or imported name with one leading underscore (dunders are the
language's, not ours).  The *groups* that the boundary separates:

* the package's top level (``ttlpolicy/*.py``) is one group, ``ttlpolicy``;
* each top-level subpackage (``ttlpolicy.sim``, ``ttlpolicy.cli``, ...) is one group, its
  modules may share their privates;
* except the reference and the simulator, where each module (``sim.policies``: each
  subpackage) is its own group: each reference module states one rule set, its classes meet
  only through their public surface, the one the Rust core mirrors; the simulator's cluster
  drives its engines through theirs.  Their package-private modules (``_sync``) and
  ``__init__`` form the package's group (``ttlpolicy.reference``);
* each adapter package (``adapters/*/src/<package>``) is one group, and ``bench/`` is one.

A use crosses the boundary when:

* ``from M import _x`` (or ``import M._x``), where ``M`` (or ``M._x``) is a project module of
  another group, or ``_x`` is a private module and the importer is outside the package (the
  package's own use of its private modules is ``test_layout``'s business);
* ``obj._x`` (load, store, or ``getattr``/``setattr``/``hasattr`` with a literal name), where
  ``obj`` is not ``self``/``cls`` and ``_x`` is defined only in other groups (defined = a
  ``def``/``class``, an assignment at module or class level or to ``self._x``/``cls._x``, an
  import alias).  A name that the user's own group also defines counts as its own: the check
  cannot know types, so it under-reports, never over-reports.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The subpackages whose every module (or subpackage) is a group of its own.
BY_MODULE = {"reference", "sim"}
#: The reach-ins that are by design, each with its reason: ``(group, name): why``.
_CRATE = (
    "the lifecycle checks both parts before changing either: the reference's mirror of the "
    "core's pub(crate) check/apply pairs (rust/src/admission.rs, scheduler/mod.rs)"
)
ALLOWED: dict[tuple[str, str], str] = {
    **{
        ("ttlpolicy.reference.lifecycle", name): _CRATE
        for name in (
            "_check_arrive",
            "_arrive_checked",
            "_check_finish",
            "_finish_checked",
            "_restarts_fcfs",
        )
    },
    ("bench", "_native"): "the benches time the native module itself, whatever the backend",
    ("ttlpolicy.serving", "_sum"): "prometheus_client's histogram, batched (see _batchable)",
}
#: Reach-ins waiting on a public name (issue 48): each ``file: name`` must still be found
#: (remove it once fixed), and nothing else may be.  None left: keep it so.
PENDING: set[str] = set()


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def group_of(path: Path, repo: Path = REPO) -> str:
    rel = path.resolve().relative_to(repo).with_suffix("").parts
    if rel[0] == "bench":
        return "bench"
    if rel[0] == "adapters":  # adapters/<a>/src/<package>/...
        return rel[3]
    inner = rel[2:]  # python/ttlpolicy/...
    if len(inner) == 1:
        return "ttlpolicy"
    if inner[0] in BY_MODULE and not private(inner[1]) and inner[1] != "__init__":
        return f"ttlpolicy.{inner[0]}.{inner[1]}"
    return f"ttlpolicy.{inner[0]}"


def sources(repo: Path = REPO) -> list[Path]:
    files = [
        *(repo / "python" / "ttlpolicy").rglob("*.py"),
        *repo.glob("adapters/*/src/**/*.py"),
        *repo.glob("bench/**/*.py"),
    ]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def module_name(path: Path, repo: Path = REPO) -> str:
    rel = path.resolve().relative_to(repo).with_suffix("").parts
    parts = rel[1:] if rel[0] == "python" else rel[3:] if rel[0] == "adapters" else rel
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def defined(tree: ast.AST) -> set[str]:
    """The private names that a module defines (see the module's docstring)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.rpartition(".")[2])
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            out |= {str(c.value) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and len(node.args) >= 2
            and _owner(node.args[0])
            and isinstance(node.args[1], ast.Constant)
        ):
            out.add(str(node.args[1].value))
    return {n for n in out if private(n)}


def _owner(node: ast.expr) -> bool:
    """``self``/``cls``/``super()``: the object's own class is using its own name."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def uses(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str, str | None]]:
    """``(line, private name, module it is imported from)``: ``!`` and the dotted path
    for a private module on an import's path, None for an attribute."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and not _owner(node.value):
            out.append((node.lineno, node.attr, None))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
            and not _owner(node.args[0])
        ):
            out.append((node.lineno, node.args[1].value, None))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            out += [(node.lineno, a.name, base) for a in node.names if private(a.name)]
            out += [(node.lineno, p, f"!{base}") for p in base.split(".") if private(p)]
        elif isinstance(node, ast.Import):
            for a in node.names:
                out += [(node.lineno, p, f"!{a.name}") for p in a.name.split(".") if private(p)]
    return out


def violations(files: list[Path], repo: Path = REPO) -> list[str]:
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in files}
    groups = {p: group_of(p, repo) for p in files}
    modules = {module_name(p, repo): p for p in files}
    roots = {m.split(".")[0] for m in modules}
    where: dict[str, set[str]] = defaultdict(set)  # private name -> groups defining it
    for p, tree in trees.items():
        for name in defined(tree):
            where[name].add(groups[p])
        if private(p.stem):
            where[p.stem].add(groups[p])
    bad = []
    for p, tree in trees.items():
        group = groups[p]
        in_package = group.startswith("ttlpolicy")
        for line, name, source in uses(tree, module_name(p, repo), p.name == "__init__.py"):
            if source is not None and source.startswith("!"):  # a private module on the path
                crosses = not in_package and source[1:].split(".")[0] in roots
            elif source is not None:  # ``from source import _name``
                target = modules.get(f"{source}.{name}") or modules.get(source)
                if target is None:
                    continue  # not a project module (the standard library's, a dependency's)
                # a private module: test_layout's within the package; a name: its group's
                crosses = not in_package if target.stem == name else groups[target] != group
            else:
                crosses = bool(where.get(name)) and group not in where[name]
            if crosses and (group, name) not in ALLOWED:
                bad.append(f"{p.relative_to(repo).as_posix()}:{line}: {name}")
    return bad


def test_no_private_name_crosses_a_package_boundary():
    found = {v.split(":")[0] + ":" + v.rsplit(":", 1)[1] for v in violations(sources())}
    assert sorted(found - PENDING) == []
    assert sorted(PENDING - found) == []  # fixed: take it off the list


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"python/ttlpolicy/sim/a.py": "class E:\n    def _step(self): pass",
          "python/ttlpolicy/cli/b.py": "def f(e):\n    e._step()"},
         ["python/ttlpolicy/cli/b.py:2: _step"]),
        ({"python/ttlpolicy/plan/a.py": "class E:\n    def _step(self): pass",
          "python/ttlpolicy/plan/b.py": "def f(e):\n    e._step()"}, []),
        ({"python/ttlpolicy/sim/a.py": "class E:\n    def _step(self): pass",
          "python/ttlpolicy/sim/b.py": "def f(e):\n    e._step()"},
         ["python/ttlpolicy/sim/b.py:2: _step"]),
        ({"python/ttlpolicy/reference/a.py": "class A:\n    def __init__(self): self._h = 1",
          "python/ttlpolicy/reference/b.py": "def f(a):\n    return getattr(a, '_h')"},
         ["python/ttlpolicy/reference/b.py:2: _h"]),
        ({"python/ttlpolicy/_v.py": "def check(): pass",
          "python/ttlpolicy/plan/c.py": "from .._v import check",
          "bench/d.py": "from ttlpolicy._v import check\nimport os\nos._exit"},
         ["bench/d.py:1: _v"]),
        ({"python/ttlpolicy/sim/a.py": "_LIMIT = 3",
          "adapters/x/src/tx/m.py": "from ttlpolicy.sim.a import _LIMIT"},
         ["adapters/x/src/tx/m.py:1: _LIMIT"]),
    ],
)  # fmt: skip
def test_the_check_finds_a_reach_in(tmp_path, files, expected):
    """Attributes, literal getattr, private names and private modules across groups; a
    group's own privates, the package's own private modules and other libraries' are not."""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert violations(sources(tmp_path), tmp_path) == expected
