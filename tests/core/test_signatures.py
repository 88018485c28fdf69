"""``inspect.signature`` of every public callable is the same on both backends (issue 48):
the constructors and functions of ``ttlpolicy.__all__`` and every public method of its classes
show the same parameter names, kinds and default values, annotations aside.  The native side
states its defaults in a ``text_signature`` (pyo3 shows a default it cannot print as ``...``);
this test holds each to the reference, which states the rule.

The one difference allowed: a native method's ``self`` is positional-only (pyo3's ``$self``),
the reference's positional-or-keyword; nobody passes ``self`` by keyword.

And the native module's own surface, where the reference has no twin: no default of any
native callable shows as ``...``, and the hand-written stub declares exactly the built
module's names and each class's members (``tests/core/test_stub.py`` holds the stub to the
reference, statically; ``tests/core/test_docstrings.py`` the docstrings of both backends).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ttlpolicy
from conftest import NATIVE, REFERENCE
from parity import SHARED

#: The public names served by both backends (``PolicyConfig`` and ``backend`` are shared).
PUBLIC = sorted(set(ttlpolicy.__all__) - SHARED)


def shown(f: Callable[..., Any]) -> list[tuple[str, str, str]]:
    """(name, kind, repr of the default) of each parameter as ``inspect.signature`` shows it,
    less a method's ``self``."""
    params = inspect.signature(f).parameters.values()
    return [
        (p.name, p.kind.name, "<required>" if p.default is p.empty else repr(p.default))
        for p in params
        if p.name != "self"
    ]


def callables(name: str) -> list[str]:
    """``name`` and ``name.method`` for each public method of the reference's class."""
    obj = getattr(REFERENCE, name)
    if not isinstance(obj, type):
        return [name]
    methods = [
        m
        for m, v in vars(obj).items()
        if not m.startswith("_") and not isinstance(v, property) and callable(getattr(obj, m))
    ]
    return [name, *(f"{name}.{m}" for m in sorted(methods))]


def resolve(backend: Any, dotted: str) -> Callable[..., Any]:
    obj = backend
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


CALLABLES = [c for name in PUBLIC for c in callables(name)]


@pytest.mark.skipif(NATIVE is None, reason="native module not built")
@pytest.mark.parametrize("dotted", CALLABLES)
def test_the_same_signature_on_both_backends(dotted: str) -> None:
    assert shown(resolve(NATIVE, dotted)) == shown(resolve(REFERENCE, dotted)), dotted


def test_the_check_sees_a_default_it_cannot_print() -> None:
    """pyo3's ``...`` for an unprintable default, a renamed or re-kinded parameter: each is a
    difference, ``self``'s kind is not."""

    def ref(self, a, b=0): ...

    def unprinted(self, /, a, b=...): ...

    def renamed(self, /, a, c=0): ...

    def keyword_only(self, /, a, *, b=0): ...

    def same(self, /, a, b=0): ...

    assert [shown(f) == shown(ref) for f in (unprinted, renamed, keyword_only, same)] == [
        False,
        False,
        False,
        True,
    ]
    assert len(CALLABLES) > len(PUBLIC)  # the methods are in


# -- the native module's own surface: defaults, and the stub's names -------------------------

STUB = Path(ttlpolicy.__file__).with_name("_native.pyi")


def native_public() -> dict[str, Any]:
    """The native module's public names (and ``__version__``), with their objects."""
    module = importlib.import_module("ttlpolicy._native")  # (whichever backend serves)
    return {n: getattr(module, n) for n in dir(module) if not n.startswith("_")} | {
        "__version__": module.__version__
    }


def stub_top_level() -> tuple[set[str], set[str], dict[str, set[str]]]:
    """The stub's ``__all__``, its top-level names (classes, functions, annotated
    constants) and each class's public members (methods, properties, ``__new__``)."""
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    declared: set[str] = set()
    members: dict[str, set[str]] = {}
    listed: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            declared.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {
                m.name
                for m in node.body
                if isinstance(m, ast.FunctionDef) and not m.name.startswith("_")
            }
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            listed = set(ast.literal_eval(node.value))
    return listed, declared, members


def native_callables() -> list[str]:
    """Dotted names of the native module's functions, classes and their public methods."""
    if NATIVE is None:
        return []
    out = []
    for name, obj in sorted(native_public().items()):
        if not callable(obj):
            continue
        out.append(name)
        if isinstance(obj, type):
            out += [
                f"{name}.{m}"
                for m in sorted(vars(obj))
                if not m.startswith("_") and callable(getattr(obj, m))
            ]
    return out


@pytest.mark.skipif(NATIVE is None, reason="native module not built")
def test_the_stub_declares_exactly_the_native_names() -> None:
    """Every public name of the built module is in the stub (its ``__all__`` and a
    declaration) and nothing else is; every class's public members likewise.  (stubtest
    checks the same and more in ``scripts/check.sh``; this runs with the tests.)"""
    listed, declared, members = stub_top_level()
    public = native_public()
    assert listed == set(public)
    assert declared == set(public)
    for name, obj in public.items():
        if isinstance(obj, type):
            runtime = {m for m in vars(obj) if not m.startswith("_")}
            assert members[name] == runtime, name


@pytest.mark.skipif(NATIVE is None, reason="native module not built")
@pytest.mark.parametrize("dotted", native_callables())
def test_no_native_default_shows_as_ellipsis(dotted: str) -> None:
    """pyo3 shows a default it cannot print as ``...``: each native callable states its
    defaults in a ``text_signature`` instead — the native-only ones (the step timer, the
    import hook) too, which the comparison with the reference above does not reach.  A
    class without a Python constructor has no signature, and so nothing to show."""
    obj = resolve(importlib.import_module("ttlpolicy._native"), dotted)
    try:
        params = inspect.signature(obj).parameters.values()
    except ValueError:
        assert isinstance(obj, type), dotted
        with pytest.raises(TypeError, match="No constructor"):
            obj()
        return
    assert [p.name for p in params if p.default is Ellipsis] == [], dotted
