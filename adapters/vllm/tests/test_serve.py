"""The OpenAI-compatible server path: ``vllm serve --scheduler-cls ttlpolicy_vllm.TTLScheduler``
on loopback, two turns of one program sent with ``vllm_xargs``, with other requests filling
the KV cache during the program's tool call.  Bounded in time; the server is stopped by the
test whatever happens."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from server import post, serve

from vllm_engine import BLOCK

pytestmark = [pytest.mark.slow, pytest.mark.engine]


def test_two_turns_over_http(tiny_model: Path, tmp_path: Path) -> None:
    env = {
        "TTLPOLICY_POLICY": '{"prefill_base_s": 100.0, "prior_mean_s": 60.0, "max_ttl_s": 300.0}',
        "TTLPOLICY_LOG_INTERVAL_S": "0.000001",  # a metrics line on every step
    }
    with serve(tiny_model, tmp_path, 25, env) as (base, _, log):
        rng = random.Random(11)
        vocab = 250  # below the trained tokenizer's size
        prompt = [rng.randrange(3, vocab) for _ in range(201)]

        def complete(tokens: list[int], max_tokens: int, **xargs: Any) -> dict[str, Any]:
            body: dict[str, Any] = {
                "model": "tiny",
                "prompt": tokens,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "ignore_eos": True,
                "return_token_ids": True,
            }
            if xargs:
                body["vllm_xargs"] = xargs
            return post(base + "/v1/completions", body)

        turn1 = complete(prompt, 24, program_id="http-program", tool="bash")
        context = prompt + turn1["choices"][0]["token_ids"]
        for _ in range(2):  # other traffic during the tool call needs the memory
            complete([rng.randrange(3, vocab) for _ in range(420)], 4)
        turn2 = complete(context + [5] * 20, 4, program_id="http-program", last_turn=1)
        cached = turn2["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == ((len(context) - 1) // BLOCK) * BLOCK == 224
    text = log.read_text(errors="replace")
    assert "ttlpolicy: pins=1" in text, text[-4000:]
    assert "pinned-prefix hits=1 (224 tokens)" in text, text[-4000:]
