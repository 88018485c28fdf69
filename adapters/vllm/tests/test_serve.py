"""The OpenAI-compatible server path: ``vllm serve --scheduler-cls ttlpolicy_vllm.TTLScheduler``
on loopback, two turns of one program sent with ``vllm_xargs``, with other requests filling
the KV cache during the program's tool call.  Bounded in time; the server is stopped by the
test whatever happens.

Its ``/metrics`` is scraped before and after: every ``ttlpolicy_*`` metric is exposed and each
counter moved exactly as the workload says.  The scheduler runs in vLLM's engine-core
process; its metrics reach the API server's ``/metrics`` through ``prometheus_client``'s
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, docs/vllm.md "Metrics")."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server import complete, get_text, serve

from ttlpolicy.serving import METRICS, MISS_CAUSES
from vllm_engine import BLOCK

pytestmark = [pytest.mark.slow, pytest.mark.engine]

NUM_BLOCKS = 25  # one is vLLM's null block


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = get_text(base + "/metrics")
    assert "vllm:num_requests_running" in text  # vLLM's own metrics stay beside them
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("ttlpolicy_")
        for s in family.samples
    }


def test_two_turns_over_http(tiny_model: Path, tmp_path: Path) -> None:
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    env = {
        "TTLPOLICY_POLICY": '{"prefill_base_s": 100.0, "prior_mean_s": 60.0, "max_ttl_s": 300.0}',
        "TTLPOLICY_LOG_INTERVAL_S": "0.000001",  # a metrics line on every step
        "PROMETHEUS_MULTIPROC_DIR": str(prom_dir),
    }
    with serve(tiny_model, tmp_path, NUM_BLOCKS, env) as (base, _, log):
        before = scrape(base)
        rng = random.Random(11)
        vocab = 250  # below the trained tokenizer's size
        prompt = [rng.randrange(3, vocab) for _ in range(201)]

        turn1 = complete(base, prompt, 24, program_id="http-program", tool="bash")
        context = prompt + turn1["choices"][0]["token_ids"]
        for _ in range(2):  # other traffic during the tool call needs the memory
            complete(base, [rng.randrange(3, vocab) for _ in range(420)], 4)
        turn2 = complete(base, context + [5] * 20, 4, program_id="http-program", last_turn=1)
        hit_tokens = turn2["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert hit_tokens == ((len(context) - 1) // BLOCK) * BLOCK == 224
        after = scrape(base)
    text = log.read_text(errors="replace")
    assert "ttlpolicy: pins=1" in text, text[-4000:]
    assert "pinned-prefix hits=1 (224 tokens)" in text, text[-4000:]

    def value(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        assert key in after, f"{key} not on /metrics:\n{sorted(after)}\n{log.read_text()[-3000:]}"
        return after[key]

    # every metric is there, with each miss cause, from the first scrape on
    for spec in METRICS.values():
        suffix = {"counter": "_total", "gauge": "", "histogram": "_count"}[spec.kind]
        if spec.labels:
            for cause in MISS_CAUSES:
                assert value(spec.name + suffix, cause=cause) == 0.0
                assert (spec.name + suffix, (("cause", cause),)) in before
        else:
            value(spec.name + suffix)
    # what the workload must have produced: turn 1 pinned (one TTL decided), the return
    # found the pin (handed over at arrival, a hit when admitted, with the cached tokens
    # vLLM reported), the last turn ended the program (no TTL decided for it); anonymous
    # requests are not programs and never pinned
    assert value("ttlpolicy_pins_total") == 1
    assert value("ttlpolicy_pin_blocks_total") == (len(context) - 1) // BLOCK
    assert value("ttlpolicy_pins_handed_over_total") == 1
    assert value("ttlpolicy_returns_hit_total") == 1
    assert value("ttlpolicy_returns_hit_tokens_total") == hit_tokens
    assert value("ttlpolicy_programs_ended_total") == 1
    assert value("ttlpolicy_pins_expired_total") == 0
    assert value("ttlpolicy_pins_reclaimed_total") == 0
    assert value("ttlpolicy_ttl_seconds_count") == 1
    assert value("ttlpolicy_ttl_seconds_bucket", le="0.0") == 0  # a pin: TTL above 0
    assert value("ttlpolicy_tool_gap_seconds_count") == 1
    assert value("ttlpolicy_return_queue_wait_seconds_count") == 1
    assert value("ttlpolicy_schedule_calls_total") >= 4  # four requests, each at least a step
    assert value("ttlpolicy_adapter_seconds_total") > 0
    # gauges: the pool and the budget (default half of it); nothing pinned at the end
    assert value("ttlpolicy_kv_blocks") == NUM_BLOCKS - 1
    assert value("ttlpolicy_pin_budget_blocks") == (NUM_BLOCKS - 1) // 2
    assert value("ttlpolicy_pinned_blocks") == 0 and value("ttlpolicy_pinned_programs") == 0
    assert value("ttlpolicy_programs_awaiting_admission") == 0
