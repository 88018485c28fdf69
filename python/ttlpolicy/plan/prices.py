"""The price table: GPU $/h per type, DRAM and SSD $/GB-h, and the tiers' bandwidth and latency.

The shipped table is ``ttlpolicy/data/prices.json`` (a source beside every number); ``load_prices
(path)`` reads another file of the same layout.  Every field is required and checked: a missing,
non-numeric, negative or non-finite field raises :class:`PriceError` naming the field (as a dotted
path, e.g. ``tiers.ssd.read_gb_s``) and the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

TIER_NAMES = ("dram", "ssd")
TIER_FIELDS = ("usd_per_gb_h", "read_gb_s", "write_gb_s", "latency_s")


class PriceError(ValueError):
    """A price table that does not validate; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class TierPrice:
    usd_per_gb_h: float
    read_gb_s: float  # 0: limited by the GPU's host link only
    write_gb_s: float
    latency_s: float  # fixed cost of one load from this tier


@dataclass(frozen=True, slots=True)
class Prices:
    gpu_usd_per_h: dict[str, float]
    tiers: dict[str, TierPrice]
    source: str  # the file they came from

    def gpu(self, name: str) -> float:
        if name not in self.gpu_usd_per_h:
            raise PriceError(
                f"{self.source}: gpus.{name}: no price for GPU {name!r} "
                f"(priced: {', '.join(sorted(self.gpu_usd_per_h))})"
            )
        return self.gpu_usd_per_h[name]


def _number(where: str, obj: Any, field: str) -> float:
    if not isinstance(obj, dict) or field not in obj:
        raise PriceError(f"{where}.{field}: missing")
    v = obj[field]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PriceError(f"{where}.{field}: must be a number, got {v!r}")
    if not math.isfinite(v) or v < 0:
        raise PriceError(f"{where}.{field}: must be a finite number >= 0, got {v!r}")
    return float(v)


def parse_prices(doc: Any, source: str) -> Prices:
    """Validate a decoded price table; raises PriceError naming the first bad field."""
    if not isinstance(doc, dict):
        raise PriceError(f"{source}: must be a JSON object")
    gpus = doc.get("gpus")
    if not isinstance(gpus, dict) or not gpus:
        raise PriceError(f"{source}: gpus: missing (an object of GPU name -> {{usd_per_h}})")
    gpu_prices = {}
    for name, entry in gpus.items():
        gpu_prices[name] = _number(f"{source}: gpus.{name}", entry, "usd_per_h")
    tiers = doc.get("tiers")
    if not isinstance(tiers, dict):
        raise PriceError(f"{source}: tiers: missing (an object with {', '.join(TIER_NAMES)})")
    tier_prices = {}
    for name in TIER_NAMES:
        where = f"{source}: tiers.{name}"
        if name not in tiers:
            raise PriceError(f"{where}: missing")
        values = [_number(where, tiers[name], f) for f in TIER_FIELDS]
        tier_prices[name] = TierPrice(*values)
    return Prices(gpu_prices, tier_prices, source)


def default_prices_path() -> Path:
    return Path(str(resources.files("ttlpolicy") / "data" / "prices.json"))


def load_prices(path: str | Path | None = None) -> Prices:
    """The shipped table, or the one at ``path``."""
    p = Path(path) if path is not None else default_prices_path()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise PriceError(f"{p}: cannot be read: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PriceError(f"{p}: line {e.lineno}: not JSON: {e.msg}") from None
    return parse_prices(doc, str(p))
