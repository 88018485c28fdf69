"""Every public callable and property says what it does, on both backends (issue 48): the
native module's classes, functions, methods and properties each have a docstring (pyo3 makes
one of the ``///`` comments in ``bindings/src``), so do the reference's, and where both
document a member they open with the same sentence: the bindings take the reference's words,
and this keeps them in step.  (``tests/core/test_signatures.py`` holds the signatures alike.)
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import pytest

import ttlpolicy
from conftest import NATIVE, REFERENCE
from parity import SHARED
from ttlpolicy.sim import hardware

#: The simulator's step timer: its reference is ``ttlpolicy.sim.hardware``.
ONE_WAY = {"StepModel": hardware.StepModel, "StepRun": hardware.StepRun}
#: A sentence ends at a full stop followed by space and a capital, a backtick or a bracket
#: (not the one of "e.g." or "i.e.").
SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z`(\"'*])")


def summary(doc: str | None) -> str:
    """A docstring's first sentence, its whitespace as single spaces."""
    first = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = SENTENCE_END.search(first)
    return first[: end.start() + 1] if end else first


def members(cls: type) -> dict[str, Any]:
    """A class's own public members: methods and properties (pyo3's getset descriptors)."""
    return {name: v for name, v in vars(cls).items() if not name.startswith("_")}


def native_members() -> list[str]:
    """``Name`` and ``Name.member`` of every public callable and property of the native
    module (the import hook ``set_config_class`` included)."""
    if NATIVE is None:
        return []
    module = importlib.import_module("ttlpolicy._native")
    out = []
    for name in sorted(n for n in dir(module) if not n.startswith("_")):
        obj = getattr(module, name)
        if callable(obj):
            out.append(name)
        if isinstance(obj, type):
            out += [f"{name}.{m}" for m in sorted(members(obj))]
    return out


def reference_twin(dotted: str) -> Any:
    """The reference's member of the same name, as stored on its class (None: none)."""
    cls_name, _, member = dotted.partition(".")
    try:
        cls = ONE_WAY.get(cls_name) or getattr(REFERENCE, cls_name)
    except AttributeError:
        return None
    return inspect.getattr_static(cls, member, None) if member else cls


def doc_of(obj: Any) -> str:
    return (getattr(obj, "__doc__", None) or "").strip()


@pytest.mark.skipif(NATIVE is None, reason="native module not built")
@pytest.mark.parametrize("dotted", native_members())
def test_every_native_member_is_documented_in_the_references_words(dotted: str) -> None:
    cls_name, _, member = dotted.partition(".")
    cls = getattr(importlib.import_module("ttlpolicy._native"), cls_name)
    native = vars(cls)[member] if member else cls
    assert summary(doc_of(native)), f"{dotted}: no docstring"
    twin = reference_twin(dotted)
    if member and (inspect.isfunction(twin) or isinstance(twin, property)) and doc_of(twin):
        assert summary(doc_of(native)) == summary(doc_of(twin)), dotted


PUBLIC = sorted(set(ttlpolicy.__all__) - SHARED)


def reference_members() -> list[str]:
    """``Name`` and ``Name.member`` for each public name of the reference and each public
    method and property of its classes."""
    out = []
    for name in PUBLIC:
        obj = getattr(REFERENCE, name)
        out.append(name)
        if isinstance(obj, type):
            out += [
                f"{name}.{m}"
                for m, v in sorted(members(obj).items())
                if inspect.isfunction(v) or isinstance(v, property)
            ]
    return out


@pytest.mark.parametrize("dotted", reference_members())
def test_every_reference_callable_and_property_is_documented(dotted: str) -> None:
    assert summary(doc_of(reference_twin(dotted))), f"{dotted}: no docstring"


def test_summary_reads_the_first_sentence() -> None:
    assert summary("Pins, by deadline.  Then more.\n\nBody.") == "Pins, by deadline."
    assert summary("A ``x``, e.g. Ray's.  Next.") == "A ``x``, e.g. Ray's."
    assert summary("One\n    line wrapped") == "One line wrapped"
    assert summary(None) == ""
    assert len(native_members()) > 150 or NATIVE is None  # the members are in
