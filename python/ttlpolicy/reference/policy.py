"""The CacheTTL decision: how long to pin a finished request's KV cache.

    benefit   = cache-miss cost + η · T
    cost/s    = request_blocks / mean_active_blocks
    τ*        = argmax_τ P(τ, tool) · benefit − cost/s · τ,   τ ≤ max_ttl_s

P comes from the tool's own window when it has ``min_tool_samples``, else from the global
window when that has ``min_total_samples``, else from an exponential prior of mean μ (the
global mean if any sample exists and ``prior_mean_from_history``, else ``prior_mean_s``),
which has the closed form τ* = μ · ln(B / (c · μ)) when B > c · μ, else 0; the prior uses
η = ``cold_start_eta`` when set.  ``scale_cost_by_memory=False`` makes c = 1 (the paper's
Eq. 2, where m / M̄ cancels).  ``PolicyConfig.published()`` sets the paper's model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .._validate import as_float, check_tenant, finite, int_in, non_negative, positive, short_repr
from ..config import PolicyConfig
from ._sync import synchronized
from .estimators import CacheMissModel, EtaEstimator, OutOfOrderCost
from .history import ToolHistory, global_window, tool_window
from .solver import solve_sorted

#: Which rule produced a decision.
SOURCES = ("tool_cdf", "global_cdf", "exponential_prior", "capped", "no_benefit")
MAX_BLOCKS = 1 << 40


@dataclass(frozen=True, slots=True)
class PinDecision:
    """A pin decision.  ``ttl_s == 0`` means: do not pin."""

    ttl_s: float
    benefit_s: float
    cost_per_s: float
    p_return: float
    source: str

    def __post_init__(self) -> None:
        # Built by `decide` with checked values; checked again for callers, as the native
        # class converts them.
        for name in ("ttl_s", "benefit_s", "cost_per_s", "p_return"):
            object.__setattr__(self, name, as_float(name, getattr(self, name)))
        if not (isinstance(self.source, str) and self.source in SOURCES):
            raise ValueError(
                f"source must be one of {', '.join(SOURCES)}, got {short_repr(self.source)}"
            )

    @property
    def pin(self) -> bool:
        """Whether to pin (``ttl_s > 0``)."""
        return self.ttl_s > 0.0


@synchronized
class TTLPolicy:
    """Owns the tool history and the η, T and cache-miss estimators; decides pins."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        if config is None:
            config = PolicyConfig()
        if not isinstance(config, PolicyConfig):
            raise TypeError(f"config must be a PolicyConfig, got {type(config).__name__}")
        self._config = config
        self._history = ToolHistory(config.window, config.max_tools)
        self._eta_estimator = EtaEstimator(
            config.eta_window_programs, config.eta_min_programs, clip=config.clip_eta
        )
        self._ooo = OutOfOrderCost(config.ooo_window)
        self._miss_model = CacheMissModel(
            config.prefill_base_s,
            config.prefill_s_per_token,
            config.prefill_s_per_token2,
            config.kv_bytes_per_token,
            config.offload_bandwidth_bytes_per_s,
            config.prefill_window,
            config.min_prefill_samples,
            config.prefill_chunk_tokens,
        )

    # -- observations -------------------------------------------------------------------
    def observe_tool(self, tool: Any, duration_s: Any, tenant: Any = "") -> None:
        """Records ``tenant``'s tool call of ``duration_s`` seconds (None: unknown tool;
        ``tenant`` "": the shared namespace, ``ToolHistory``)."""
        self._history.observe(tool, duration_s, tenant)

    def observe_program(self, total_turns: Any) -> None:
        """Records a finished program of ``total_turns`` turns (for η)."""
        self._eta_estimator.observe(total_turns)

    def observe_queueing_delay(self, delay_s: Any) -> None:
        """Records a queueing delay (s) of a request that returned to a dropped cache (for T)."""
        self._ooo.observe(delay_s)

    def observe_prefill(self, tokens: Any, seconds: Any, cached_tokens: Any = 0) -> None:
        """Records a measured prefill (for the cache-miss model): ``tokens`` new tokens after
        ``cached_tokens`` already computed took ``seconds``."""
        self._miss_model.observe_prefill(tokens, seconds, cached_tokens)

    # -- read-only views ------------------------------------------------------------------
    @property
    def config(self) -> PolicyConfig:
        """Its ``PolicyConfig``."""
        return self._config

    @property
    def eta(self) -> float:
        """η from the finished programs' turns (see ``EtaEstimator``)."""
        return self._eta_estimator.eta

    @property
    def out_of_order_cost_s(self) -> float:
        """T: the mean queueing delay in seconds of requests that returned to a dropped cache."""
        return self._ooo.mean_s

    def tool_count(self, tool: Any, tenant: Any = "") -> int:
        """Durations recorded for ``tenant``'s ``tool`` (None: all tools)."""
        return self._history.count(tool, tenant)

    def miss_cost_s(self, prefix_tokens: Any, offloaded_tokens: Any = 0) -> float:
        """Seconds to rebuild ``prefix_tokens`` tokens, ``offloaded_tokens`` of them reloadable."""
        return self._miss_model.miss_cost_s(prefix_tokens, offloaded_tokens)

    # -- the decision ---------------------------------------------------------------------
    def decide(
        self,
        tool: Any = None,
        request_blocks: Any = 0,
        mean_active_blocks: Any = 1.0,
        cache_miss_cost_s: Any = None,
        prefix_tokens: Any = 0,
        now: Any = 0.0,
        offloaded_tokens: Any = 0,
        tenant: Any = "",
    ) -> PinDecision:
        """How long to pin the ``request_blocks`` of a request that just called ``tool``.

        ``cache_miss_cost_s`` overrides the miss-cost model (which otherwise prices
        ``prefix_tokens``, ``offloaded_tokens`` of them held by an offload tier).
        ``now`` is validated and reserved for time-dependent rules; no clock is read.
        ``tenant``'s own window of ``tool`` is read (``ToolHistory``).
        """
        history = self._history
        # Validate everything before touching any state.
        who = check_tenant(tenant)
        window = tool_window(history, tool, who) if tool is not None else None
        count = len(window) if window is not None else 0
        blocks = int_in("request_blocks", request_blocks, 0, MAX_BLOCKS)
        mean_active = positive("mean_active_blocks", mean_active_blocks)
        finite("now", now)
        if cache_miss_cost_s is None:
            miss = self._miss_model.miss_cost_s(prefix_tokens, offloaded_tokens)
        else:
            miss = non_negative("cache_miss_cost_s", cache_miss_cost_s)
            int_in("prefix_tokens", prefix_tokens, 0, MAX_BLOCKS)
            int_in("offloaded_tokens", offloaded_tokens, 0, MAX_BLOCKS)
        cfg = self._config
        if window is not None and count >= cfg.min_tool_samples and count > 0:
            samples, source = window.sorted, "tool_cdf"
        elif history.total_count() >= cfg.min_total_samples and history.total_count() > 0:
            samples, source = global_window(history).sorted, "global_cdf"
        else:
            samples, source = None, "exponential_prior"
        eta = self._eta_estimator.eta
        if samples is None and cfg.cold_start_eta is not None:
            eta = cfg.cold_start_eta
        benefit = miss + eta * self._ooo.mean_s
        # Eq. 2 of the paper multiplies the benefit by m / M̄ as well: the share cancels.
        cost = blocks / mean_active if cfg.scale_cost_by_memory else 1.0
        if not benefit > 0.0:
            return PinDecision(0.0, benefit, cost, 0.0, "no_benefit")
        if samples is None:
            return self._exponential(benefit, cost)
        tau, _value, k = solve_sorted(samples, benefit, cost, cfg.max_ttl_s)
        return PinDecision(tau, benefit, cost, k / len(samples), source)

    def _exponential(self, benefit: float, cost: float) -> PinDecision:
        mean = global_window(self._history).mean() if self._config.prior_mean_from_history else None
        mu = mean if mean is not None and mean > 0.0 else self._config.prior_mean_s
        max_ttl = self._config.max_ttl_s
        if cost == 0.0:
            tau = max_ttl  # holding is free: keep it as long as allowed
            source = "capped"
        elif benefit > cost * mu:
            # (cost · μ may underflow to 0 with a subnormal μ: the ratio is then inf, as in
            # IEEE division, and the TTL capped)
            scale = cost * mu
            tau = mu * math.log(benefit / scale if scale > 0.0 else math.inf)
            source = "exponential_prior"
            if tau > max_ttl:
                tau, source = max_ttl, "capped"
        else:
            tau, source = 0.0, "exponential_prior"
        p = 1.0 - math.exp(-tau / mu)
        return PinDecision(tau, benefit, cost, p, source)


def tool_history(policy: Any) -> ToolHistory | None:
    """A reference ``TTLPolicy``'s tool durations, read (never copied) by load control; None
    for any other object (a native policy keeps its own)."""
    return policy._history if isinstance(policy, TTLPolicy) else None
