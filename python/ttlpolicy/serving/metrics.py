"""Counters of what an engine adapter did, and its own cost per scheduling step.

One definition for both adapters (vLLM's ``TTLScheduler.ttl_stats()``, SGLang's
``TTLRadixCache.ttl_stats()``), in the library's units: KV blocks (SGLang: pages), tokens,
seconds.  Logged through the engine's logger every ``log_interval_s`` and on demand.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass


@dataclass
class AdapterMetrics:
    pins: int = 0  # finished requests whose cached prefix was pinned
    pinned_blocks_total: int = 0  # blocks pinned, summed over pins
    expiries: int = 0  # pins released at their deadline
    reclaims: int = 0  # pins (or held chains) released early: memory was short
    released_at_once: int = 0  # pins released by abort, last turn or end of program
    pinned_prefix_hits: int = 0  # returning requests admitted onto their program's pin
    pinned_prefix_hit_tokens: int = 0  # tokens those requests found held for them
    schedule_calls: int = 0  # scheduling steps (vLLM: schedule(); SGLang: queue orderings)
    adapter_s: float = 0.0  # time in the adapter's own code, all calls
    engine_s: float = 0.0  # time in the engine's own scheduling code the adapter wraps
    pinned_blocks_now: int = 0  # gauge, refreshed each step
    offloaded_tokens_at_finish: int = 0  # prefix tokens an offload tier held at finish
    admitted_programs_now: int = 0  # gauge: programs admitted by load control
    programs_awaiting_admission_now: int = 0  # gauge: programs it holds back
    free_blocks_reordered: int = 0  # free cached blocks moved into next-use eviction order

    @property
    def adapter_us_per_schedule(self) -> float:
        return 1e6 * self.adapter_s / self.schedule_calls if self.schedule_calls else 0.0

    def as_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["adapter_us_per_schedule"] = self.adapter_us_per_schedule
        return d

    def log(self, logger: logging.Logger) -> None:
        logger.info(
            "ttlpolicy: pins=%d (blocks now %d) expiries=%d reclaims=%d released=%d "
            "pinned-prefix hits=%d (%d tokens) admitted programs=%d awaiting admission=%d "
            "adapter %.1f us/schedule over %d calls",
            self.pins,
            self.pinned_blocks_now,
            self.expiries,
            self.reclaims,
            self.released_at_once,
            self.pinned_prefix_hits,
            self.pinned_prefix_hit_tokens,
            self.admitted_programs_now,
            self.programs_awaiting_admission_now,
            self.adapter_us_per_schedule,
            self.schedule_calls,
        )
