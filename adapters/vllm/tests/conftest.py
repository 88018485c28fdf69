"""The adapter's tests run a real vLLM engine on CPU (``ttlpolicy_vllm.testing``, imported
first: it sets vLLM's environment before vllm is imported)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from ttlpolicy_vllm.testing import build_tiny_model

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Imports a ``bench/`` script by name, as its neighbours there import one another."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module
