"""The price table: the shipped one is complete; a bad one names its field."""

from __future__ import annotations

import json

import pytest

from ttlpolicy.plan.prices import PriceError, default_prices_path, load_prices, parse_prices
from ttlpolicy.sim import GPUS


def shipped():
    return json.loads(default_prices_path().read_text())


def test_the_shipped_table_prices_every_gpu_and_tier_with_a_source():
    doc = shipped()
    prices = load_prices()
    assert set(prices.gpu_usd_per_h) == set(GPUS)
    for entry in [*doc["gpus"].values(), *doc["tiers"].values()]:
        assert entry["source"].strip()
    assert prices.tiers["dram"].usd_per_gb_h > prices.tiers["ssd"].usd_per_gb_h > 0


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["tiers"]["ssd"].pop("read_gb_s"), "tiers.ssd.read_gb_s: missing"),
        (lambda d: d["tiers"]["dram"].update(usd_per_gb_h="cheap"), "tiers.dram.usd_per_gb_h"),
        (lambda d: d["tiers"]["dram"].update(latency_s=-1), "tiers.dram.latency_s"),
        (lambda d: d["gpus"]["h100-80g"].update(usd_per_h=True), "gpus.h100-80g.usd_per_h"),
        (lambda d: d["tiers"].pop("ssd"), "tiers.ssd: missing"),
        (lambda d: d.pop("gpus"), "gpus: missing"),
    ],
)
def test_a_bad_field_is_named(edit, field):
    doc = shipped()
    edit(doc)
    with pytest.raises(PriceError, match=field.replace(".", r"\.")):
        parse_prices(doc, "p.json")


def test_unknown_gpu_and_unreadable_files_are_named(tmp_path):
    with pytest.raises(PriceError, match=r"gpus\.tpu-v9"):
        load_prices().gpu("tpu-v9")
    bad = tmp_path / "p.json"
    bad.write_text("{nope")
    with pytest.raises(PriceError, match="not JSON"):
        load_prices(bad)
    with pytest.raises(PriceError, match="cannot be read"):
        load_prices(tmp_path / "missing.json")
