"""The adapter's tests run on CPU: a real vLLM engine (``bench/vllm_engine.py``, imported
first: it sets vLLM's environment before vllm is imported), or vLLM's scheduler without one.

On vLLM 0.33, whose only build is CUDA's, the tests marked ``engine`` are deselected
(``scripts/test.sh``, docs/vllm-versions.md) and vLLM is told it runs on the CPU platform
(it finds no GPU and would otherwise fail to infer a device when its config is built)."""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # read when vllm.platforms is imported

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from vllm_engine import Engine, build_tiny_model, make_engine

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Imports a ``bench/`` script by name, as its neighbours there import one another."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module


def ttl_engine(
    model: Path, policy: str, pin_budget_fraction: str, num_blocks: int
) -> Iterator[Engine]:
    """A ``TTLScheduler`` engine on ``model`` with ``TTLPOLICY_POLICY`` and the pin budget
    fraction set while it starts; shut down after its one yield."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", policy)
    mp.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", pin_budget_fraction)
    engine = make_engine(model, "ttlpolicy_vllm.TTLScheduler", num_blocks)
    mp.undo()
    yield engine
    engine.llm.llm_engine.engine_core.shutdown()
