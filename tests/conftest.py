"""Shared fixtures: every public class exists twice (Rust core, Python reference); tests that
take ``impl`` run against both.  scripts/test.sh sets TTLPOLICY_REQUIRE_NATIVE=1 so that a
missing native module fails the run instead of skipping the Rust half."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from ttlpolicy import _backend
from ttlpolicy.reference import estimators, history, policy, solver

REFERENCE = SimpleNamespace(
    name="python",
    ToolHistory=history.ToolHistory,
    EtaEstimator=estimators.EtaEstimator,
    OutOfOrderCost=estimators.OutOfOrderCost,
    CacheMissModel=estimators.CacheMissModel,
    PinDecision=policy.PinDecision,
    TTLPolicy=policy.TTLPolicy,
    solve_ttl=solver.solve_ttl,
)


def _native_namespace() -> SimpleNamespace | None:
    try:
        from ttlpolicy import _native
    except ImportError:
        if os.environ.get("TTLPOLICY_REQUIRE_NATIVE") == "1":
            raise
        return None
    ns = SimpleNamespace(name="rust")
    for key in vars(REFERENCE):
        if key != "name":
            setattr(ns, key, getattr(_native, key))
    return ns


NATIVE = _native_namespace()


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
def impl(request: pytest.FixtureRequest) -> SimpleNamespace:
    """The classes of one backend (parametrised over both)."""
    return request.param


@pytest.fixture
def backends() -> tuple[SimpleNamespace, SimpleNamespace]:
    """(reference, native) for differential tests; skipped only when native is not built."""
    if NATIVE is None:
        pytest.skip("native module not built")
    return REFERENCE, NATIVE


def test_backend_is_reported() -> None:
    assert _backend.backend in ("rust", "python")
