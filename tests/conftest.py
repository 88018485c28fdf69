"""Shared fixtures: every public class exists twice (Rust core, Python reference); tests that
take ``impl`` run against both.  scripts/test.sh sets TTLPOLICY_REQUIRE_NATIVE=1 so that a
missing native module fails the run instead of skipping the Rust half.

Hypothesis profiles: ``fast`` (the default, for a developer's edit-test loop) and ``ci-long``
(CI: ``--hypothesis-profile=ci-long`` or ``HYPOTHESIS_PROFILE=ci-long``).  Property tests set
no example counts of their own, so the profile decides."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# `impl`/`backends` hold immutable backend descriptions: sharing them across examples is safe.
# No deadline: the machines the suite runs on are shared, so one slow example means nothing.
_SHARED = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("fast", _SHARED, max_examples=50)
settings.register_profile("ci-long", _SHARED, max_examples=250)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

#: reference modules searched, in order, for a public name
REFERENCE_MODULES = (
    "solver",
    "history",
    "estimators",
    "policy",
    "scheduler",
    "prefix_tree",
    "admission",
    "lifecycle",
    "router",
    "linker",
)


class Backend:
    """Resolves a public name (``impl.ToolHistory``) in one backend."""

    def __init__(self, name: str, modules: list[ModuleType]) -> None:
        self.name = name
        self._modules = modules

    def __getattr__(self, attr: str) -> Any:
        for m in self._modules:
            if hasattr(m, attr):
                return getattr(m, attr)
        raise AttributeError(f"{self.name} backend has no {attr!r}")

    def __repr__(self) -> str:
        return f"Backend({self.name})"


REFERENCE = Backend(
    "python", [importlib.import_module(f"ttlpolicy.reference.{m}") for m in REFERENCE_MODULES]
)


def _native_backend() -> Backend | None:
    try:
        from ttlpolicy import _native
    except ImportError:
        if os.environ.get("TTLPOLICY_REQUIRE_NATIVE") == "1":
            raise
        return None
    return Backend("rust", [_native])


NATIVE = _native_backend()


def both_backends() -> list:
    return [
        pytest.param(REFERENCE, id="python"),
        pytest.param(
            NATIVE,
            id="rust",
            marks=pytest.mark.skipif(NATIVE is None, reason="native module not built"),
        ),
    ]


@pytest.fixture(params=both_backends())
def impl(request: pytest.FixtureRequest) -> Backend:
    """The classes of one backend (parametrised over both)."""
    return request.param


@pytest.fixture
def backends() -> tuple[Backend, Backend]:
    """(reference, native) for differential tests; skipped only when native is not built."""
    if NATIVE is None:
        pytest.skip("native module not built")
    return REFERENCE, NATIVE


@pytest.fixture(autouse=True, scope="session")
def private_trace_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Every test writes trace caches under a temporary folder, never the user's."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTLPOLICY_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="session")
def mooncake_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planner tests plan a 400-request head of the shipped Mooncake excerpt (seconds,
    not minutes), written once per session.  (A fixture here, not in a ``tests/plan/
    conftest.py``: a second module named ``conftest`` shadows this one for tests that import
    it.)"""
    from trace_files import write_mooncake_head

    return write_mooncake_head(tmp_path_factory.mktemp("mooncake"))
