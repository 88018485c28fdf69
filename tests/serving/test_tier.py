"""A host tier's prices and model (``ttlpolicy.serving.OffloadSettings``), as
``TTLPOLICY_OFFLOAD`` sets them: vLLM's ``TTLCachePolicy`` (and any engine's host tier) reads
them once at start."""

from __future__ import annotations

import json

import pytest

from ttlpolicy.serving import OffloadSettings


def test_settings_from_the_environment_and_their_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTLPOLICY_OFFLOAD", json.dumps({"max_ttl_s": 60, "refit_every": 8}))
    s = OffloadSettings.from_env()
    assert s.max_ttl_s == 60 and s.refit_every == 8 and s.group_depth == 2
    # 16 tokens: prefill 0.8 ms, reload 2 MiB at 25 GB/s; DRAM 2 MiB at $0.0036/GiB-hour
    assert s.benefit_per_hit == pytest.approx((0.8e-3 - 2**21 / 25e9) * 4.0 / 3600)
    assert s.price_per_chunk_s == pytest.approx(0.0036 / 512 / 3600)
    monkeypatch.delenv("TTLPOLICY_OFFLOAD")
    assert OffloadSettings.from_env() == OffloadSettings()


def test_the_model_is_priced_and_sized_for_the_tier() -> None:
    s = OffloadSettings(max_ttl_s=50.0, refit_every=3, group_depth=1, window=16)
    model = s.group_ttl(100)
    assert model.benefit_per_hit == s.benefit_per_hit
    assert model.price_per_block_s == s.price_per_chunk_s
    assert model.max_ttl_s == 50.0 and model.refit_every == 3 and model.group_depth == 1
    assert model.pooled() == (50.0, 0.0)  # (before a refit every group holds up to the cap)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("{", "must be a JSON object"),
        ("[1]", "must be a JSON object"),
        ('{"max_ttl": 1}', "unknown fields \\['max_ttl'\\]"),
        ('{"max_ttl_s": -1}', "max_ttl_s must be finite and >= 0, got -1"),
        ('{"window": "8"}', "window must be a number"),
        ('{"reload_bytes_per_s": 0}', "reload_bytes_per_s must be > 0"),
        ('{"chunk_tokens": true}', "chunk_tokens must be a number"),
    ],
)
def test_bad_settings_name_the_field(monkeypatch: pytest.MonkeyPatch, raw: str, match: str) -> None:
    monkeypatch.setenv("TTLPOLICY_OFFLOAD", raw)
    with pytest.raises((ValueError, TypeError), match=match):
        OffloadSettings.from_env()
