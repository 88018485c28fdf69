"""The native module's hand-written stub (``python/ttlpolicy/_native.pyi``) states the
reference's surface: the same public classes, functions, members, parameter names, kinds and
defaults.  Read statically (the stub is parsed, not imported), so this runs without the
native module; ``scripts/check.sh`` runs stubtest, which holds the stub to the built module.
Together: reference = stub = module, so the stub cannot drift from either.

Defaults: the stub writes ``...`` for a default that is a core constant (the bindings do not
restate it); that must be a defaulted parameter in the reference too.  A default the stub
writes out (``None``, ``0.0``, ``False``) must be the reference's value.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

import ttlpolicy
from conftest import REFERENCE
from parity import NATIVE_TABLES, SHARED
from ttlpolicy.sim import hardware

STUB = Path(ttlpolicy.__file__).with_name("_native.pyi")
#: Native-only names: the core's tables and the hook the package calls at import.
NATIVE_ONLY = NATIVE_TABLES
#: The simulator's step timer: its reference is ``ttlpolicy.sim.hardware``, which has more
#: (constructors from ``Line``s, ``run_s``, ``lines``): there, every member of the stub must
#: be the reference's, not the other way round; constructors differ by design.
ONE_WAY = {"StepModel": hardware.StepModel, "StepRun": hardware.StepRun}
#: Dunder members of result types the stub declares for their by-value equality.
SKIP_MEMBERS = {"__new__", "__eq__", "__hash__"}


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"))


def stub_names() -> dict[str, ast.ClassDef | ast.FunctionDef]:
    """The stub's top-level classes and functions, by name, less the native-only ones."""
    return {
        node.name: node
        for node in _stub().body
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name not in NATIVE_ONLY
    }


def reference(name: str) -> Any:
    return ONE_WAY[name] if name in ONE_WAY else getattr(REFERENCE, name)


def stub_params(fn: ast.FunctionDef, drop_first: bool) -> list[tuple[str, str, Any]]:
    """``(name, kind, default)`` of each parameter: kind as ``inspect.Parameter.kind``'s name,
    default ``inspect.Parameter.empty`` when none, ``Ellipsis`` for ``...``."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[Any] = [inspect.Parameter.empty] * (len(positional) - len(a.defaults))
    defaults += [ast.literal_eval(d) for d in a.defaults]
    out = [
        (p.arg, "POSITIONAL_ONLY" if p in a.posonlyargs else "POSITIONAL_OR_KEYWORD", d)
        for p, d in zip(positional, defaults, strict=True)
    ]
    if a.vararg is not None:
        out.append((a.vararg.arg, "VAR_POSITIONAL", inspect.Parameter.empty))
    for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        default = inspect.Parameter.empty if d is None else ast.literal_eval(d)
        out.append((p.arg, "KEYWORD_ONLY", default))
    if a.kwarg is not None:
        out.append((a.kwarg.arg, "VAR_KEYWORD", inspect.Parameter.empty))
    return out[1:] if drop_first else out


def assert_same_parameters(stub: ast.FunctionDef, ref: Any, what: str) -> None:
    # (a constructor's signature omits ``cls``/``self``; a method taken from a class has ``self``)
    want = stub_params(stub, drop_first=stub.name == "__new__")
    got = [(p.name, p.kind.name, p.default) for p in inspect.signature(ref).parameters.values()]
    assert [(n, k) for n, k, _ in want] == [(n, k) for n, k, _ in got], what
    for (name, _, s), (_, _, r) in zip(want, got, strict=True):
        assert (s is inspect.Parameter.empty) == (r is inspect.Parameter.empty), (
            f"{what}({name}): default in the stub {s!r}, in the reference {r!r}"
        )
        if s is not Ellipsis and s is not inspect.Parameter.empty:
            assert type(s) is type(r) and s == r, f"{what}({name}) default: {s!r} != {r!r}"


def stub_members(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    """Public methods and properties of a stub class (properties are ``@property`` defs)."""
    return {
        node.name: node
        for node in cls.body
        if isinstance(node, ast.FunctionDef)
        and (not node.name.startswith("_") or node.name == "__new__")
    }


def is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


#: Arguments without a default, for building a reference object to list its attributes.
REQUIRED = {"policy": lambda: REFERENCE.TTLPolicy(), "total_blocks": lambda: 10,
            "pin_budget_blocks": lambda: 1,
            "scheduler": lambda: REFERENCE.ProgramScheduler(
                REFERENCE.TTLPolicy(), 10, 1)}  # fmt: skip


def reference_members(cls: type) -> set[str]:
    """Public members of a reference class: methods, properties and slots of the class, and
    the attributes its constructor sets (on an object built with defaults, where it has
    them, or with ``REQUIRED``)."""
    names = set(dir(cls))
    params = inspect.signature(cls).parameters.values()
    if cls not in ONE_WAY.values() and all(
        p.default is not p.empty or p.name in REQUIRED for p in params
    ):
        names |= set(
            dir(cls(**{p.name: REQUIRED[p.name]() for p in params if p.default is p.empty}))
        )
    return {n for n in names if not n.startswith("_")}


def test_the_stub_declares_every_public_name_and_each_one_has_a_reference():
    declared = _stub_all()
    assert set(stub_names()) == declared - NATIVE_ONLY
    public = set(ttlpolicy.__all__) - SHARED
    assert declared - NATIVE_ONLY == public | set(ONE_WAY)


def _stub_all() -> set[str]:
    for node in _stub().body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError("the stub has no __all__")


@pytest.mark.parametrize("name", sorted(stub_names()))
def test_stub_matches_the_reference(name):
    node, ref = stub_names()[name], reference(name)
    if isinstance(node, ast.FunctionDef):
        assert_same_parameters(node, ref, name)
        return
    members = stub_members(node)
    public = {m for m in members if m not in SKIP_MEMBERS}
    if name in ONE_WAY:
        assert public <= reference_members(ref), f"{name}: {public - reference_members(ref)}"
    else:
        assert public == reference_members(ref), name
        assert_same_parameters(members["__new__"], ref, f"{name}()")
    for member in sorted(public):
        fn = members[member]
        attr = inspect.getattr_static(ref, member, None)
        if is_property(fn):
            assert not inspect.isfunction(attr), f"{name}.{member}: a method in the reference"
        else:
            assert inspect.isfunction(attr), f"{name}.{member}: not a method in the reference"
            assert_same_parameters(fn, getattr(ref, member), f"{name}.{member}")


def test_the_check_sees_a_drifted_stub():
    """A renamed parameter, a lost default and a written default that differs all fail."""
    ref = REFERENCE.ToolHistory.observe
    for source in (
        "def observe(self, tool, seconds): ...",
        "def observe(self, tool, duration_s=...): ...",
    ):
        fn = ast.parse(source).body[0]
        assert isinstance(fn, ast.FunctionDef)
        with pytest.raises(AssertionError):
            assert_same_parameters(fn, ref, "ToolHistory.observe")
    fn = ast.parse(
        "def finish(self, program_id, now, blocks_held, tool='a', rebuild_s=..., last_turn=...):"
        " ..."
    ).body[0]
    assert isinstance(fn, ast.FunctionDef)
    with pytest.raises(AssertionError, match="tool"):
        assert_same_parameters(fn, REFERENCE.AdmissionControl.finish, "AdmissionControl.finish")
