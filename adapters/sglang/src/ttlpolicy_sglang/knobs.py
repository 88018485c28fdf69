"""The adapter's environment knobs, the same names and defaults as the vLLM adapter's.

Read once, when SGLang builds its tree cache (``TTLRadixCache.__init__``).  A bad value fails
the server's start with the knob's name and the value, not a request later.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ttlpolicy


def env_float(name: str, default: float, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {raw!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Knobs:
    pin_budget_fraction: float  # TTLPOLICY_PIN_BUDGET_FRACTION: share of KV tokens pinned at most
    policy: ttlpolicy.PolicyConfig  # TTLPOLICY_POLICY: a PolicyConfig as JSON; see from_env
    log_interval_s: float  # TTLPOLICY_LOG_INTERVAL_S: 0 disables the periodic log line

    @classmethod
    def from_env(cls) -> Knobs:
        """The knobs; load control (``PolicyConfig.admission``) is on unless
        ``TTLPOLICY_POLICY`` sets ``"admission": false`` (the library's own default is off,
        for existing users)."""
        return cls(
            pin_budget_fraction=env_float("TTLPOLICY_PIN_BUDGET_FRACTION", 0.5, 0.0, 1.0),
            policy=ttlpolicy.PolicyConfig.for_engine(os.environ.get("TTLPOLICY_POLICY")),
            log_interval_s=env_float("TTLPOLICY_LOG_INTERVAL_S", 10.0, 0.0, 1e9),
        )
