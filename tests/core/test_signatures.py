"""``inspect.signature`` of every public callable is the same on both backends (issue 48):
the constructors and functions of ``ttlpolicy.__all__`` and every public method of its classes
show the same parameter names, kinds and default values, annotations aside.  The native side
states its defaults in a ``text_signature`` (pyo3 shows a default it cannot print as ``...``);
this test holds each to the reference, which states the rule.

The one difference allowed: a native method's ``self`` is positional-only (pyo3's ``$self``),
the reference's positional-or-keyword; nobody passes ``self`` by keyword.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
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
