"""The simulator's contracts: every policy implements ``sim.interface.Policy``, verdicts are
the enum, and no two modules of ``ttlpolicy.sim`` import each other (even for type checking)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ttlpolicy.sim
from ttlpolicy.sim import POLICY_NAMES, Policy, Verdict, make_policy
from ttlpolicy.sim.kv_cache import KVCache

SIM = Path(ttlpolicy.sim.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(SIM.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules of the ``sim`` package that ``path`` imports (relative imports, any branch)."""
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            if node.module:
                out.add(".".join([*base, *node.module.split(".")]))
            else:
                out.update(".".join([*base, alias.name]) for alias in node.names)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """An import cycle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node, [node])):
            return cycle
    return None


def test_no_import_cycle_inside_the_simulator() -> None:
    graph = {_module(p): _imports(p) for p in SIM.rglob("*.py")}
    assert "sim.engine" in graph["sim"] and "sim.interface" in graph["sim.engine"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("name", [n.replace("<s>", "5") for n in POLICY_NAMES])
def test_every_policy_implements_the_interface(name: str) -> None:
    policy = make_policy(name)
    assert isinstance(policy, Policy)
    assert isinstance(policy.name, str) and policy.name == name


def test_kv_release_takes_a_verdict_only() -> None:
    kv = KVCache(10)
    assert kv.acquire("A", 0, 4) == (0, 0)
    with pytest.raises(TypeError, match="verdict"):
        kv.release("A", 4, 4, "pin")  # type: ignore[arg-type]
    assert kv.used == 4  # a refused release changes nothing
    kv.release("A", 4, 4, Verdict.PIN)
    assert kv.pinned == 4
