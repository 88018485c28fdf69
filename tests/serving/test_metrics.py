"""The adapters' counters (``ttlpolicy.serving.AdapterMetrics``): what ``ttl_stats()`` returns
and what the periodic log line says."""

from __future__ import annotations

import logging

import pytest

from ttlpolicy.serving import AdapterMetrics


def test_the_dict_holds_every_counter_and_the_cost_per_step() -> None:
    m = AdapterMetrics(schedule_calls=4, adapter_s=0.002, pins=3)
    d = m.as_dict()
    assert d["pins"] == 3 and d["schedule_calls"] == 4
    assert d["adapter_us_per_schedule"] == pytest.approx(500.0)
    assert AdapterMetrics().as_dict()["adapter_us_per_schedule"] == 0.0  # (no call yet)
    assert {"engine_s", "pinned_blocks_now", "reclaims", "pinned_prefix_hit_tokens"} <= set(d)


def test_the_log_line_reports_pins_and_cost(caplog: pytest.LogCaptureFixture) -> None:
    m = AdapterMetrics(pins=7, pinned_blocks_now=12, reclaims=2, schedule_calls=10, adapter_s=1e-4)
    with caplog.at_level(logging.INFO, logger="t"):
        m.log(logging.getLogger("t"))
    (line,) = caplog.messages
    assert "pins=7 (blocks now 12)" in line and "reclaims=2" in line
    assert "adapter 10.0 us/schedule over 10 calls" in line
