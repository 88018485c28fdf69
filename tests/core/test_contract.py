"""The engine contract of ``ProgramLifecycle`` (``ttlpolicy.contract.LifecycleInterface``,
issue 48): both backends implement every member with its signature, and the engines that
drive a lifecycle — the vLLM and SGLang adapters, the simulator's policies — use nothing
else of it (static: every attribute read on ``self.life``, or on a local bound to it)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from conftest import Backend
from ttlpolicy.contract import LifecycleInterface, members

REPO = Path(__file__).resolve().parents[2]
#: Where engines keep their lifecycle: the attribute ``life`` of the engine's object.
HOLDER = "life"


def shown(f: object) -> list[tuple[str, str, str]]:
    return [
        (p.name, p.kind.name, "<required>" if p.default is p.empty else repr(p.default))
        for p in inspect.signature(f).parameters.values()  # type: ignore[arg-type]
        if p.name != "self"
    ]


@pytest.mark.parametrize("member", sorted(members()))
def test_both_backends_implement_the_contract(impl: Backend, member: str) -> None:
    cls = impl.ProgramLifecycle
    assert issubclass(cls, LifecycleInterface)
    declared = inspect.getattr_static(LifecycleInterface, member)
    if isinstance(declared, property):  # (the reference's parts are plain attributes)
        life = cls(impl.ProgramScheduler(impl.TTLPolicy(), 10, 1))
        assert not callable(getattr(life, member)), f"{member}: a method, not a value"
    else:
        assert shown(getattr(cls, member)) == shown(declared), member


def used(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each attribute read on ``self.life`` or a local bound to it."""
    tree = ast.parse(source)

    def is_life(node: ast.expr) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == HOLDER
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        )

    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        aliases = {
            t.id
            for node in ast.walk(fn)
            if isinstance(node, ast.Assign) and is_life(node.value)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and (
                is_life(node.value)
                or (isinstance(node.value, ast.Name) and node.value.id in aliases)
            ):
                out.append((node.lineno, node.attr))
    return sorted(set(out))


def engine_sources() -> list[Path]:
    files = [*REPO.glob("adapters/*/src/**/*.py"), *(REPO / "python" / "ttlpolicy").rglob("*.py")]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def test_the_engines_use_only_the_contract() -> None:
    allowed = members()
    users, outside = set(), []
    for path in engine_sources():
        rel = path.relative_to(REPO).as_posix()
        for line, name in used(path.read_text(encoding="utf-8")):
            users.add(rel)
            if name not in allowed:
                outside.append(f"{rel}:{line}: {name}")
    assert outside == []
    assert {
        "adapters/vllm/src/ttlpolicy_vllm/scheduler.py",
        "adapters/sglang/src/ttlpolicy_sglang/programs.py",
        "python/ttlpolicy/sim/policies/ttlpolicy_plugin.py",
    } <= users  # (the scan sees the three engines)


def test_the_scan_sees_a_use_outside_the_contract() -> None:
    source = (
        "class E:\n"
        "    def step(self):\n"
        "        self.life.expire(0.0)\n"
        "        life = self.life\n"
        "        life._held.clear()\n"
        "        return self.other.arrive\n"
    )
    assert used(source) == [(3, "expire"), (5, "_held")]
