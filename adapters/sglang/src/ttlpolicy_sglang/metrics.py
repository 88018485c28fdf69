"""Counters of what the adapter did, and its own cost per scheduling step.

Logged through SGLang's logger every ``log_interval_s`` (and on demand with ``log()``); read
programmatically with ``TTLRadixCache.ttl_stats()``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass


@dataclass
class AdapterMetrics:
    pins: int = 0  # finished requests whose prefix was locked
    pinned_tokens_total: int = 0  # tokens on the locked paths, summed over pins
    expiries: int = 0  # pins released at their deadline
    reclaims: int = 0  # pins released early because memory was short
    released_at_once: int = 0  # pins released by abort, last turn or end of program
    pinned_prefix_hits: int = 0  # returning requests admitted onto their program's pin
    schedule_calls: int = 0  # waiting-queue orderings (one per scheduling pass)
    adapter_s: float = 0.0  # time in the adapter's own code, all calls
    sglang_order_s: float = 0.0  # time in SGLang's own calc_priority, under the adapter
    pinned_tokens_now: int = 0  # gauge, refreshed on each ordering
    admitted_programs_now: int = 0  # gauge: programs admitted by load control
    programs_awaiting_admission_now: int = 0  # gauge: programs it holds back

    @property
    def adapter_us_per_schedule(self) -> float:
        return 1e6 * self.adapter_s / self.schedule_calls if self.schedule_calls else 0.0

    def as_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["adapter_us_per_schedule"] = self.adapter_us_per_schedule
        return d

    def log(self, logger: logging.Logger) -> None:
        logger.info(
            "ttlpolicy: pins=%d (tokens now %d) expiries=%d reclaims=%d released=%d "
            "pinned-prefix hits=%d admitted programs=%d awaiting admission=%d "
            "adapter %.1f us/schedule over %d calls",
            self.pins,
            self.pinned_tokens_now,
            self.expiries,
            self.reclaims,
            self.released_at_once,
            self.pinned_prefix_hits,
            self.admitted_programs_now,
            self.programs_awaiting_admission_now,
            self.adapter_us_per_schedule,
            self.schedule_calls,
        )
