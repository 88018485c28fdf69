"""How the miss price that ``ttlpolicy`` learns (the library's ``CacheMissModel``, as
``TTLScheduler`` feeds it) compares with a chunk-aware fit, on issue 10's agent sweep.
(Written before the library took the cached start of each sample and the engine's chunk
size, when the two differed; they now give nearly the same prices.)

The library fits ``seconds = a + b·n + c·n²`` to (new tokens n, step seconds) samples of first
chunks — at most one token budget each, after cached prefixes of up to 120k tokens — and
prices a lost prefix of P tokens as ``a + b·P + c·P²``.  The chunk-aware fit (measurement
only, not a library rule) samples each step's attention units too (Σ n·start + n(n+1)/2 over
the first chunks, ``start`` the tokens already cached), fits ``a + b·n + c·attn`` with no
negative coefficient, and prices P as its prefill in chunks of the token budget, as the
simulator's engine runs one.  Per setup and rate: mean JCT and hit rate with the exact
prefill time (``ttlpolicy:exact``), the library's fit (``ttlpolicy``) and the chunk-aware
one, and each price against the exact one at 50k and 100k tokens.

    PYTHONPATH=python:bench python bench/investigations/miss_fit_probe.py \\
        [--setups llama-3.1-8b@h100-80g,...] [--rates 0.004,0.005]
"""

from __future__ import annotations

import argparse
import sys
from collections import deque

import numpy as np

import agent_sweep  # bench/, beside this script
import sim_sweep
from ttlpolicy.sim import roofline, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin


def non_negative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with no negative coefficient (drop the most negative, refit)."""
    active = list(range(x.shape[1]))
    while True:
        coef = np.linalg.lstsq(x[:, active], y, rcond=None)[0]
        if coef.min() >= 0.0 or len(active) == 1:
            out = np.zeros(x.shape[1])
            out[active] = np.maximum(coef, 0.0)
            return out
        del active[int(np.argmin(coef))]


class ChunkAwareFit:
    """Replaces a ``ttlpolicy`` plug-in's sampling and pricing (same samples kept:
    first chunks of freshly admitted calls, the policy's window and minimum count)."""

    def __init__(self, plugin: TTLPolicyPlugin) -> None:
        self.plugin = plugin
        self.samples: deque[tuple[float, float, float]] = deque(maxlen=256)
        self.coef: np.ndarray | None = None

    def stepped(self, chunks: list[tuple[Call, int]], step_s: float) -> None:
        unstarted = self.plugin.unstarted_calls
        tokens = attn = 0.0
        for call, n in chunks:
            if call.call_id in unstarted:
                unstarted.remove(call.call_id)
                tokens += n
                attn += n * call.computed + n * (n + 1) / 2.0
        if tokens:
            self.samples.append((tokens, attn, step_s))
            self.coef = None

    def miss_cost_s(self, tokens: int) -> float:
        cfg = self.plugin.ttl_policy.config
        if len(self.samples) < cfg.min_prefill_samples:
            return cfg.prefill_base_s + cfg.prefill_s_per_token * tokens
        if self.coef is None:
            d = np.array(self.samples)
            self.coef = non_negative_lstsq(np.c_[np.ones(len(d)), d[:, :2]], d[:, 2])
        a, b, c = self.coef
        budget = self.plugin.view.config.token_budget
        total, done = 0.0, 0
        while done < tokens:
            n = min(budget, tokens - done)
            total += a + b * n + c * (n * done + n * (n + 1) / 2.0)
            done += n
        return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setups", default="llama-3.1-8b@h100-80g,llama-3.1-70b@h100-80g")
    ap.add_argument("--rates", default="0.004,0.005")
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(None, agent_sweep.OPTIONS)
    if programs is None:
        return 2
    print("setup rate | JCT s (hit): exact / library fit / chunk-aware | price at 50k, 100k "
          "tokens: exact / library / chunk-aware")  # fmt: skip
    for setup in args.setups.split(","):
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
        for rate in (float(r) for r in args.rates.split(",")):
            cells, prices = [], []
            for kind in ("exact", "library", "chunk-aware"):
                plugin = make_policy("ttlpolicy:exact" if kind == "exact" else "ttlpolicy")
                assert isinstance(plugin, TTLPolicyPlugin)
                if kind == "chunk-aware":
                    fit = ChunkAwareFit(plugin)
                    plugin.stepped = fit.stepped  # type: ignore[method-assign]
                    plugin.miss_cost_s = fit.miss_cost_s  # type: ignore[method-assign]
                s = simulate(hw, plugin, programs, rate_per_s=rate).summary()
                cells.append(f"{s['jct_mean_s']:,.0f} ({s['hit_rate']:.2f})")
                prices.append("/".join(f"{plugin.miss_cost_s(n):.2f}" for n in (50_000, 100_000)))
            print(f"{setup} {rate:g} | {' / '.join(cells)} | {' ; '.join(prices)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
