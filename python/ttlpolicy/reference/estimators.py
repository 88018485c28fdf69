"""The three live estimators behind the benefit of a pin.

* ``EtaEstimator`` — memorability η = −corr(k, N−k) over recently finished programs.
* ``OutOfOrderCost`` — T, the mean queueing delay of requests whose cache had been dropped.
* ``CacheMissModel`` — what a dropped cache costs to rebuild: prefill time (a fitted
  quadratic in tokens) or reload time from an offload tier, whichever is smaller.

Sums are recomputed from the window on each observation, in arrival order, so both backends
perform the same floating-point operations and agree exactly.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from .._validate import int_in, non_negative, positive
from ._sync import synchronized

MAX_TURNS = 1_000_000
MAX_WINDOW = 1 << 20
#: Token counts are fitted in units of 1000 tokens: keeps n⁴ well inside double range.
TOKENS_PER_UNIT = 1000.0


@synchronized
class EtaEstimator:
    """η = −corr(k, N−k) over the turns of the last ``window`` finished programs, clipped to
    [0, 1] (``clip=False``: as it is, in [−1, 1], as the paper has it).

    A program of N turns contributes the pairs (k, N−k) for k = 1..N.  Fixed-length programs
    give η = 1 (progress predicts the rest), memoryless lengths give η ≈ 0.  Until
    ``min_programs`` are seen — or when the correlation is undefined — η = 1, as the
    CacheTTL paper starts.
    """

    def __init__(self, window: int = 256, min_programs: int = 8, clip: Any = True) -> None:
        if not isinstance(clip, bool):  # first: the native binding converts it before the rest
            raise TypeError(f"clip must be a bool, got {type(clip).__name__}")
        self._clip = clip
        self._window = int_in("window", window, 1, MAX_WINDOW)
        self._min_programs = int_in("min_programs", min_programs, 0, MAX_WINDOW)
        self._turns: deque[int] = deque()
        self._eta = 1.0

    def observe(self, total_turns: Any) -> None:
        """Records a finished program of ``total_turns`` turns."""
        n_turns = int_in("total_turns", total_turns, 1, MAX_TURNS)
        if len(self._turns) == self._window:
            self._turns.popleft()
        self._turns.append(n_turns)
        self._eta = self._compute()

    def _compute(self) -> float:
        if len(self._turns) < self._min_programs or not self._turns:
            return 1.0
        # Exact integer sums over all pairs (k, r = N − k), k = 1..N.
        n = sk = sr = skk = srr = skr = 0
        for big_n in self._turns:
            s1 = big_n * (big_n + 1) // 2  # Σk
            s2 = big_n * (big_n + 1) * (2 * big_n + 1) // 6  # Σk²
            n += big_n
            sk += s1
            skk += s2
            sr += big_n * big_n - s1  # Σ(N − k)
            srr += big_n * big_n * big_n - 2 * big_n * s1 + s2  # Σ(N − k)²
            skr += big_n * s1 - s2  # Σk(N − k)
        cov = n * skr - sk * sr
        var_k = n * skk - sk * sk
        var_r = n * srr - sr * sr
        if var_k <= 0 or var_r <= 0:
            return 1.0
        corr = float(cov) / math.sqrt(float(var_k) * float(var_r))
        return min(1.0, max(0.0, -corr)) if self._clip else -corr

    @property
    def eta(self) -> float:
        """η = −corr(k, N−k) over the window's programs; 1.0 until ``min_programs`` are seen."""
        return self._eta

    @property
    def window(self) -> int:
        """Finished programs kept (the last ``window``)."""
        return self._window

    @property
    def min_programs(self) -> int:
        """Finished programs needed before η is estimated (η = 1 until then)."""
        return self._min_programs

    @property
    def clip(self) -> bool:
        """Whether η is clipped to [0, 1] (False: as it is, in [−1, 1])."""
        return self._clip

    def count(self) -> int:
        """Programs in the window."""
        return len(self._turns)


@synchronized
class OutOfOrderCost:
    """T: mean queueing delay over the last ``window`` requests that returned to a dropped cache."""

    def __init__(self, window: int = 256) -> None:
        self._window = int_in("window", window, 1, MAX_WINDOW)
        self._delays: deque[float] = deque()
        self._mean = 0.0

    def observe(self, delay_s: Any) -> None:
        """Records one queueing delay of ``delay_s`` seconds."""
        d = non_negative("delay_s", delay_s)
        if len(self._delays) == self._window:
            self._delays.popleft()
        self._delays.append(d)
        total = 0.0
        for x in self._delays:
            total += x
        self._mean = total / len(self._delays)

    @property
    def mean_s(self) -> float:
        """T: the mean queueing delay in seconds over the window; 0.0 until a delay is observed."""
        return self._mean

    @property
    def window(self) -> int:
        """Queueing delays kept (the last ``window``)."""
        return self._window

    def count(self) -> int:
        """Delays in the window."""
        return len(self._delays)


def solve3(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Cramer's rule for a 3×3 system; None when singular.  Written out so that Rust can
    perform the very same operations."""

    def det(a: list[list[float]]) -> float:
        return (
            a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
        )

    d = det(m)
    if d == 0.0 or not math.isfinite(d):
        return None
    out = []
    for col in range(3):
        mc = [row[:] for row in m]
        for r in range(3):
            mc[r][col] = v[r]
        out.append(det(mc) / d)
    return out


def solve_non_negative(m: list[list[float]], v: list[float]) -> list[float] | None:
    """The normal equations ``m·x = v`` (3×3) solved with no coefficient below zero; None when
    a system on the way is singular.  The unconstrained solution first; while a coefficient is
    negative, the most negative one (the first of equals) is fixed at 0 and the rest re-solved
    — an active-set approximation of non-negative least squares, exact when the unconstrained
    solution has no negative coefficient."""
    active = [0, 1, 2]
    while True:
        k = len(active)
        sub = [[m[i][j] for j in active] for i in active]
        rhs = [v[i] for i in active]
        if k == 3:
            sol = solve3(sub, rhs)
        elif k == 2:
            d = sub[0][0] * sub[1][1] - sub[0][1] * sub[1][0]
            if d == 0.0 or not math.isfinite(d):
                return None
            sol = [(rhs[0] * sub[1][1] - sub[0][1] * rhs[1]) / d,
                   (sub[0][0] * rhs[1] - rhs[0] * sub[1][0]) / d]  # fmt: skip
        else:
            if sub[0][0] == 0.0 or not math.isfinite(sub[0][0]):
                return None
            sol = [rhs[0] / sub[0][0]]
        if sol is None or not all(math.isfinite(c) for c in sol):
            return None
        worst = 0
        for i in range(1, k):
            if sol[i] < sol[worst]:
                worst = i
        if sol[worst] >= 0.0 or k == 1:
            out = [0.0, 0.0, 0.0]
            for i, c in zip(active, sol, strict=True):
                out[i] = max(0.0, c)
            return out
        del active[worst]


@synchronized
class CacheMissModel:
    """Seconds to rebuild a dropped prefix.

    Prefill: ``a·chunks + b·n + c·n²`` (n tokens), least squares with a, b, c >= 0 (so the
    price never falls as the prefix grows) over the last ``window`` measured (tokens, seconds)
    pairs once ``min_samples`` are in and the fit is well posed; the configured defaults
    before that.  A sample is one engine step, so ``a`` is a step's fixed cost; an engine that
    prefills in chunks of ``prefill_chunk_tokens`` pays it once per chunk
    (``chunks = ⌈n / prefill_chunk_tokens⌉``; None: one step, ``chunks = 1``).
    Reload: ``tokens · kv_bytes_per_token / bandwidth`` when an offload tier holds the blocks.
    The miss cost is the smaller of the two.  Predictions are never negative.
    """

    def __init__(
        self,
        prefill_base_s: Any = 0.01,
        prefill_s_per_token: Any = 1e-4,
        prefill_s_per_token2: Any = 0.0,
        kv_bytes_per_token: Any = 131072,
        offload_bandwidth_bytes_per_s: Any = None,
        window: int = 256,
        min_samples: int = 8,
        prefill_chunk_tokens: Any = None,
    ) -> None:
        self._default_coeffs = (
            non_negative("prefill_base_s", prefill_base_s),
            non_negative("prefill_s_per_token", prefill_s_per_token),
            non_negative("prefill_s_per_token2", prefill_s_per_token2),
        )
        self._kv_bytes_per_token = int_in("kv_bytes_per_token", kv_bytes_per_token, 0, 1 << 40)
        self._offload_bandwidth_bytes_per_s = (
            None
            if offload_bandwidth_bytes_per_s is None
            else positive("offload_bandwidth_bytes_per_s", offload_bandwidth_bytes_per_s)
        )
        self._window = int_in("window", window, 1, MAX_WINDOW)
        self._min_samples = int_in("min_samples", min_samples, 3, MAX_WINDOW)
        self._prefill_chunk_tokens = (
            None
            if prefill_chunk_tokens is None
            else int_in("prefill_chunk_tokens", prefill_chunk_tokens, 1, 1 << 40)
        )
        # (tokens, attention units: tokens·(tokens + 2·cached), seconds), in TOKENS_PER_UNIT
        self._points: deque[tuple[float, float, float]] = deque()
        # Coefficients in per-token units: (a, b, c) with prefill = a + b·n + c·n².
        self._fit: tuple[float, float, float] | None = None

    def observe_prefill(self, tokens: Any, seconds: Any, cached_tokens: Any = 0) -> None:
        """A prefill chunk of ``tokens`` new tokens after ``cached_tokens`` already computed
        took ``seconds``.  Its attention term is ``c·tokens·(tokens + 2·cached)`` — the part
        of ``c·(cached + tokens)²`` it adds — so chunks of one prefix sum to ``c·prefix²``: a
        model fitted on first chunks after long cached prefixes prices a whole prefix right
        (without ``cached_tokens`` those chunks look cheap and a long prefix is priced low)."""
        n = int_in("tokens", tokens, 0, 1 << 40)
        s = non_negative("seconds", seconds)
        k = int_in("cached_tokens", cached_tokens, 0, 1 << 40)
        if len(self._points) == self._window:
            self._points.popleft()
        x = n / TOKENS_PER_UNIT
        self._points.append((x, x * (x + 2.0 * (k / TOKENS_PER_UNIT)), s))
        self._fit = self._refit()

    def _refit(self) -> tuple[float, float, float] | None:
        if len(self._points) < self._min_samples:
            return None
        # A quadratic needs three distinct token counts; with fewer the normal equations are
        # singular and only rounding keeps the determinant off zero, giving wild coefficients.
        if len({x for x, _, _ in self._points}) < 3:
            return None
        # Features 1, x and q (q = x² for a chunk with nothing cached before it).
        s0 = s1 = sxx = sq = sxq = sqq = y0 = y1 = y2 = 0.0
        for x, q, y in self._points:
            s0 += 1.0
            s1 += x
            sxx += x * x
            sq += q
            sxq += q * x
            sqq += q * q
            y0 += y
            y1 += x * y
            y2 += q * y
        # No coefficient below zero: the measured prefills are first chunks of at most one
        # token budget, and a concave free fit of them (c < 0) extrapolates the price of a
        # long context down to 0 s — the contexts most worth keeping would look free to lose.
        sol = solve_non_negative([[s0, s1, sq], [s1, sxx, sxq], [sq, sxq, sqq]], [y0, y1, y2])
        if sol is None:
            return None
        a, b, c = sol
        return a, b / TOKENS_PER_UNIT, c / (TOKENS_PER_UNIT * TOKENS_PER_UNIT)

    @property
    def fitted(self) -> bool:
        """Whether the prefill coefficients are fitted from measurements (else the configured
        defaults)."""
        return self._fit is not None

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """(a, b, c) of prefill_s = a + b·tokens + c·tokens², fitted or default."""
        return self._fit if self._fit is not None else self._default_coeffs

    @property
    def default_coeffs(self) -> tuple[float, float, float]:
        """The configured ``(prefill_base_s, prefill_s_per_token, prefill_s_per_token2)``,
        used until a fit."""
        return self._default_coeffs

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token (for the offload reload time)."""
        return self._kv_bytes_per_token

    @property
    def offload_bandwidth_bytes_per_s(self) -> float | None:
        """The offload tier's reload bandwidth in bytes per second; None: no offload tier."""
        return self._offload_bandwidth_bytes_per_s

    @property
    def window(self) -> int:
        """Measurements kept for the prefill fit (the last ``window``)."""
        return self._window

    @property
    def min_samples(self) -> int:
        """Measurements needed before the prefill fit is used."""
        return self._min_samples

    @property
    def prefill_chunk_tokens(self) -> int | None:
        """The engine's prefill chunk (most prompt tokens per step); None: one step per
        prefix."""
        return self._prefill_chunk_tokens

    def prefill_s(self, tokens: Any) -> float:
        """Predicted prefill seconds of ``tokens`` tokens (never negative)."""
        count = int_in("tokens", tokens, 0, 1 << 40)
        if count == 0:
            return 0.0
        n = float(count)
        a, b, c = self.coefficients
        chunk = self._prefill_chunk_tokens
        steps = 1.0 if chunk is None else float(-(-count // chunk))  # ⌈count / chunk⌉
        return max(0.0, a * steps + b * n + c * n * n)

    def reload_s(self, tokens: Any) -> float | None:
        """Seconds to load ``tokens`` of KV back from the offload tier; None without a tier."""
        n = int_in("tokens", tokens, 0, 1 << 40)
        if self._offload_bandwidth_bytes_per_s is None:
            return None
        return float(n * self._kv_bytes_per_token) / self._offload_bandwidth_bytes_per_s

    def miss_cost_s(self, prefix_tokens: Any, offloaded_tokens: Any = 0) -> float:
        """Cost of losing ``prefix_tokens`` of cache, of which ``offloaded_tokens`` are still
        held by the offload tier: recompute all, or reload those and recompute the rest."""
        p = int_in("prefix_tokens", prefix_tokens, 0, 1 << 40)
        o = int_in("offloaded_tokens", offloaded_tokens, 0, 1 << 40)
        if o > p:
            raise ValueError(f"offloaded_tokens must be <= prefix_tokens ({p}), got {o}")
        recompute = self.prefill_s(p)
        reload = self.reload_s(o)
        if reload is None or o == 0:
            return recompute
        return min(recompute, reload + self.prefill_s(p - o))
