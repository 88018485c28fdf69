"""Fixtures of the SGLang adapter's tests; the CPU engine stand-in lives in
``bench/sglang_engine.py`` (shared with bench/sglang_overhead.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ttlpolicy_sglang

from sglang_engine import (
    MAX_CONTEXT,
    TEST_POLICY,
    FakeClock,
    MiniScheduler,
    build_cache,
    make_scheduler,
    tokens,
)

__all__ = [
    "MAX_CONTEXT",
    "TEST_POLICY",
    "FakeClock",
    "MiniScheduler",
    "build_cache",
    "make_scheduler",
    "tokens",
]


@pytest.fixture(scope="session", autouse=True)
def registered() -> None:
    """The plug-in's entry point, as SGLang's ``load_plugins`` runs it; only the hook is not
    applied (hooks patch the whole process): tests call the hook function instead."""
    ttlpolicy_sglang.register()


@pytest.fixture
def policy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.setenv("TTLPOLICY_POLICY", TEST_POLICY)
    monkeypatch.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0.75")
    yield monkeypatch
