"""The adapter's tests run a real vLLM engine on CPU (``ttlpolicy_vllm.testing``, imported
first: it sets vLLM's environment before vllm is imported)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ttlpolicy_vllm.testing import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
