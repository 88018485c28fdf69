"""A host (CPU/DRAM) tier's economics and the online group-TTL model they price, read from
``TTLPOLICY_OFFLOAD``: what vLLM's ``TTLCachePolicy`` (and any engine's host tier) orders its
chunks by.  One parser; a bad value fails the engine's start with the field named."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields

from ..groups.online import OnlineGroupTTL


@dataclass(frozen=True)
class OffloadSettings:
    """The tier's economics and the tuner's knobs.  Default prices are the ones the prefix-tree
    comparison documents (bench/RESULTS.md): prefill at 20k tokens/s on a $4/hour GPU, host
    DRAM at $0.0036/GiB-hour; a Llama-3.1-8B bf16 KV of 128 KiB per token; chunks of 16 tokens
    (vLLM's block); reload over PCIe at 25 GB/s."""

    gpu_price_per_hour: float = 4.0
    tier_price_per_gib_hour: float = 0.0036
    chunk_tokens: float = 16
    kv_bytes_per_token: float = 131072
    prefill_tokens_per_s: float = 20000.0
    reload_bytes_per_s: float = 25e9
    max_ttl_s: float = 3600.0
    refit_every: int = 64
    group_depth: int = 2
    window: int = 256

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"OffloadSettings.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"OffloadSettings.{f.name} must be finite and >= 0, got {value!r}")
        for name in ("reload_bytes_per_s", "prefill_tokens_per_s", "chunk_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"OffloadSettings.{name} must be > 0, got {getattr(self, name)!r}")

    @classmethod
    def from_env(cls, name: str = "TTLPOLICY_OFFLOAD") -> OffloadSettings:
        raw = os.environ.get(name, "")
        if not raw:
            return cls()
        try:
            values = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name} must be a JSON object: {e}") from None
        if not isinstance(values, dict):
            raise ValueError(f"{name} must be a JSON object, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{name} has unknown fields {unknown}; known: {sorted(known)}")
        return cls(**values)

    @property
    def chunk_bytes(self) -> float:
        return self.chunk_tokens * self.kv_bytes_per_token

    @property
    def reload_s_per_chunk(self) -> float:
        return self.chunk_bytes / self.reload_bytes_per_s

    @property
    def benefit_per_hit(self) -> float:
        """Dollars a chunk hit saves: GPU time of its prefill minus its reload."""
        prefill_s = self.chunk_tokens / self.prefill_tokens_per_s
        saved_s = max(0.0, prefill_s - self.reload_s_per_chunk)
        return saved_s * self.gpu_price_per_hour / 3600.0

    @property
    def price_per_chunk_s(self) -> float:
        """Dollars one chunk costs per second held in the tier."""
        return self.tier_price_per_gib_hour * self.chunk_bytes / 2**30 / 3600.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def group_ttl(self, capacity_chunks: int) -> OnlineGroupTTL:
        """The online group-TTL model of a tier of ``capacity_chunks`` chunks at these prices:
        its shadow tree outlives a few evictions (4× the capacity), and it remembers at least
        as many idle groups as the tier holds chunks."""
        return OnlineGroupTTL(
            self.benefit_per_hit,
            self.price_per_chunk_s,
            self.max_ttl_s,
            refit_every=self.refit_every,
            max_blocks=max(1, 4 * capacity_chunks),
            group_depth=self.group_depth,
            window=self.window,
            max_idle_groups=max(1024, capacity_chunks),
        )
