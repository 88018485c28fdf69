"""One configuration (DRAM and SSD capacity, tier policy) → its objectives, by simulation.

Objectives: output tokens/s (max), mean and p99 TTFT (min), dollars per hour (min) and dollars
per million output tokens.  ``cost_usd_per_h`` is the GPUs plus the *provisioned* DRAM and SSD
(a static configuration); ``cost_held_usd_per_h`` charges the tiers for the GB-hours actually
held instead (a pooled memory tier billed by use — the setting where a TTL saves money).
``billing`` chooses which one the search optimises (and ``ttlpolicy plan`` reports $ per
million tokens at that cost).

Group-TTL economics per tier (the tuner's benefit and price, per block): a hit saves the block's
prefill (its tokens × the compute line's cost per token, ``Hardware.steps``) less its load from
the tier, valued at the engine's GPU dollars per second; holding costs the tier's $/GB-h.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..sim.hardware import GPUS, MODELS, Hardware, roofline
from ..traces.cache import BlockTrace, load_block_trace
from .prices import Prices, load_prices
from .tiers import Tier, TieredStore, replay

GB = 1e9
POLICY_KINDS = ("lru", "ttl", "group")
GROUPINGS = ("depth", "reuse")
BILLINGS = ("provisioned", "held")


@dataclass(frozen=True, slots=True, order=True)
class Config:
    """A point of the search space: capacities in GB; one policy for both lower tiers."""

    dram_gb: float
    ssd_gb: float
    policy: str = "lru"  # lru | ttl | group
    ttl_s: float | None = None  # policy "ttl"
    grouping: str | None = None  # policy "group": depth | reuse

    def __post_init__(self) -> None:
        for name in ("dram_gb", "ssd_gb"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number of GB, got {v!r}")
            if v < 0:
                raise ValueError(f"{name} must be >= 0 GB, got {v!r}")
        if self.policy not in POLICY_KINDS:
            raise ValueError(
                f"policy must be one of {', '.join(POLICY_KINDS)}, got {self.policy!r}"
            )
        if self.policy == "ttl" and (self.ttl_s is None or not self.ttl_s >= 0):
            raise ValueError(f"policy 'ttl' needs ttl_s >= 0, got {self.ttl_s!r}")
        if self.policy == "group" and self.grouping not in GROUPINGS:
            raise ValueError(
                f"policy 'group' needs grouping in {', '.join(GROUPINGS)}, got {self.grouping!r}"
            )

    def canonical(self) -> Config:
        """With no tier below HBM the policy does nothing: one point, not one per policy."""
        if self.dram_gb == 0 and self.ssd_gb == 0:
            return Config(0.0, 0.0)
        return Config(
            float(self.dram_gb), float(self.ssd_gb), self.policy, self.ttl_s, self.grouping
        )

    @property
    def policy_label(self) -> str:
        if self.policy == "ttl":
            return f"ttl {self.ttl_s:g}s"
        if self.policy == "group":
            return f"group-{self.grouping}"
        return "lru"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Config:
        return Config(
            float(d["dram_gb"]),
            float(d["ssd_gb"]),
            d.get("policy", "lru"),
            d.get("ttl_s"),
            d.get("grouping"),
        )


@dataclass(frozen=True, slots=True)
class Setup:
    """Everything but the configuration (picklable: each worker rebuilds its context from it)."""

    trace: str
    model: str
    gpu: str
    prices_path: str | None = None
    block_tokens: int | None = None
    session_rate_per_s: float | None = None
    max_requests: int | None = None
    rate_scale: float = 1.0
    hbm_fraction: float = 0.5  # share of the engine's KV memory that caches prefixes
    decode_batch: int = 32
    efficiency: float = 0.6
    max_ttl_s: float = 3600.0

    def validate(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"--model: unknown model {self.model!r} (known: {', '.join(MODELS)})")
        if self.gpu not in GPUS:
            raise ValueError(f"--gpu: unknown GPU {self.gpu!r} (known: {', '.join(GPUS)})")
        if not (0 < self.hbm_fraction <= 1):
            raise ValueError(f"--hbm-fraction must be in (0, 1], got {self.hbm_fraction!r}")
        if not (self.rate_scale > 0 and math.isfinite(self.rate_scale)):
            raise ValueError(f"--rate-scale must be a finite number > 0, got {self.rate_scale!r}")
        if not (self.max_ttl_s > 0 and math.isfinite(self.max_ttl_s)):
            raise ValueError(f"--max-ttl-s must be a finite number > 0, got {self.max_ttl_s!r}")


class Context:
    """A loaded setup: trace, hardware, prices."""

    def __init__(self, setup: Setup) -> None:
        setup.validate()
        self.setup = setup
        self.prices: Prices = load_prices(setup.prices_path)
        self.gpu_usd_per_h = self.prices.gpu(setup.gpu) * MODELS[setup.model].tp
        self.hw: Hardware = roofline(setup.model, setup.gpu, efficiency=setup.efficiency)
        trace = load_block_trace(
            setup.trace,
            block_tokens=setup.block_tokens,
            session_rate_per_s=setup.session_rate_per_s,
            max_requests=setup.max_requests,
        )
        if setup.rate_scale != 1.0:
            t0 = float(trace.arrival_s[0])
            trace = BlockTrace(
                t0 + (trace.arrival_s - t0) / setup.rate_scale,
                trace.input_tokens,
                trace.output_tokens,
                trace.offsets,
                trace.keys,
                trace.block_tokens,
                trace.digest,
            )
        self.trace = trace
        self.block_bytes = self.hw.kv_bytes_per_token * trace.block_tokens
        self.hbm_blocks = max(
            1, int(self.hw.kv_capacity_bytes * setup.hbm_fraction // self.block_bytes)
        )

    def tier_cost_usd_per_h(self, dram_gb: float, ssd_gb: float) -> float:
        t = self.prices.tiers
        return dram_gb * t["dram"].usd_per_gb_h + ssd_gb * t["ssd"].usd_per_gb_h

    def cost_usd_per_h(self, cfg: Config) -> float:
        return self.gpu_usd_per_h + self.tier_cost_usd_per_h(cfg.dram_gb, cfg.ssd_gb)

    def tiers(self, cfg: Config) -> list[Tier]:
        out = []
        for name, gb in (("dram", cfg.dram_gb), ("ssd", cfg.ssd_gb)):
            p = self.prices.tiers[name]
            out.append(
                Tier(
                    name,
                    int(gb * GB // self.block_bytes),
                    p.read_gb_s * GB if p.read_gb_s > 0 else math.inf,
                    p.latency_s,
                    cfg.policy,
                    cfg.ttl_s if cfg.ttl_s is not None else math.inf,
                )
            )
        return out

    def group_source(self, tiers: list[Tier], grouping: str):
        """The online group-TTL tuner for the tiers (see the module doc for its economics)."""
        from ..groups import sources as group_sources

        usd_per_s = self.gpu_usd_per_h / 3600.0
        prefill_s = self.hw.steps.compute.c_tok * self.trace.block_tokens
        link = self.hw.gpu.pcie_bytes_per_s * self.hw.model.tp
        benefits, prices = [], []
        for t in tiers:
            load_s = t.latency_s + self.block_bytes / min(t.read_bytes_per_s, link)
            benefits.append(max(0.0, prefill_s - load_s) * usd_per_s)
            prices.append(self.prices.tiers[t.name].usd_per_gb_h * self.block_bytes / GB / 3600.0)
        return group_sources.make(grouping, benefits, prices, self.setup.max_ttl_s)

    def evaluate(self, cfg: Config) -> dict[str, float]:
        tiers = self.tiers(cfg)
        groups = (
            self.group_source(tiers, cfg.grouping or "depth") if cfg.policy == "group" else None
        )
        store = TieredStore(self.hbm_blocks, tiers, groups)
        m = replay(self.trace, self.hw, store, decode_batch=self.setup.decode_batch)
        s = m.summary()
        cost = self.cost_usd_per_h(cfg)
        span_h = (m.makespan_s or 1.0) / 3600.0
        held_gb = [b * self.block_bytes / GB / 3600.0 / span_h for b in m.block_s[1:]]
        held_cost = self.gpu_usd_per_h + self.tier_cost_usd_per_h(*held_gb)
        thr = s["throughput_tok_s"]
        return {
            "cost_usd_per_h": cost,
            "cost_held_usd_per_h": held_cost,
            "throughput_tok_s": thr,
            "ttft_mean_s": s["ttft_mean_s"],
            "ttft_p99_s": s["ttft_p99_s"],
            "usd_per_m_tok": cost / (thr * 3600.0) * 1e6 if thr > 0 else math.inf,
            "hit_rate": s["hit_rate"],
            "hbm_hit_rate": s["hbm_hit_rate"],
            "dram_held_gb": held_gb[0],
            "ssd_held_gb": held_gb[1],
        }
