"""Online group TTLs: Kareto's per-group TTLs by return on investment, refitted as accesses
arrive on a bounded window of past reuse intervals (no hindsight fit).

``OnlineGroupTTL`` wraps the library's ``PrefixTree`` (Rust core or Python reference), which
does the grouping and keeps each group's window of reuse intervals; this class only decides
*when* to fit and keeps the last fit.  It is the one source of group TTLs and ROIs for the
vLLM offload policy (``ttlpolicy_vllm.offload``) and the simulator's tier planner.

**API** (kept small and stable)::

    g = OnlineGroupTTL(benefit_per_hit, price_per_block_s, max_ttl_s, refit_every=64, ...)
    hits = g.access(hash_ids, now)   # one request's blocks, head first; returns held leading blocks
    g.group_key(hash_ids) -> tuple   # the group of the LAST block of hash_ids
    g.ttl_s(hash_ids_or_key)         # TTL of that group, as of the last refit
    g.roi(hash_ids_or_key)           # value per block-second of that group, as of the last refit
    g.eviction_rank(group, last_access_s, now, ...)  # a tier's eviction order (smallest first)
    g.back_value(group, idle_s)      # that group's value per block-second given idle_s
    g.expire(now) -> int             # drop expired blocks from the shadow tree
    g.refit() ; g.accesses, g.refits, g.hit_blocks, g.accessed_blocks, g.expired_blocks,
    g.evicted_blocks, g.block_seconds(now), len(g)

A group key is a tuple of at most ``group_depth`` hashes, and the group of a hash sequence
is the group of its last block, ``tuple(hash_ids[:group_depth])`` (the PrefixTree rule), so
``ttl_s(key)`` and ``ttl_s(hash_ids)`` agree whenever ``key == group_key(hash_ids)``.

**Formulas.**  Let R_g be group g's window (its last ``window`` reuse intervals, recorded by
the tree on every access that reaches g), b = ``benefit_per_hit`` (what a block hit saves:
prefill time minus reload time, in seconds or dollars), c = ``price_per_block_s`` (holding a
block one second, same unit) and P_g(τ) = |{r ∈ R_g : r ≤ τ}| / |R_g|.

* TTL:  τ_g = argmax_{0 ≤ τ ≤ max_ttl_s} P̃_g(τ)·b − c·τ  (ties go to the smaller τ), with
  P̃_g = (n·P_g + k·P_*)/(n + k): the group's n intervals shrunk toward the pooled windows'
  CDF P_* by the prior weight k = ``prior_weight`` (k = 0: ``PrefixTree.group_ttls``, i.e.
  ``solve_ttl`` on R_g alone).  The shrunk fit tries 0, the group's intervals and
  ``POOLED_SKETCH`` quantiles of the pooled ones plus τ_*.  A group fitted on 4 intervals
  no longer gets a TTL shorter than most reuses seen (issue 37).
* Pooled prior: a group with no interval of its own gets τ_* fitted the same way on the
  pooled windows of every remembered group (so a new program's blocks are neither dropped on
  sight nor kept forever); before the first refit every group gets ``max_ttl_s``.
* ROI:  roi_g = P_g(τ_g)·b / H_g with H_g = mean_{r ∈ R_g} min(r, τ_g), the block-seconds
  one access makes a block hold; that is the value per block-second of keeping the group.
  roi_g = 0 when P_g(τ_g) = 0; +inf when H_g = 0 < P_g(τ_g) (reused at once, costs nothing).
  Groups without intervals use the pooled roi_*; before the first refit every roi is 0.
* ROI given the idle time (``back_value``, the eviction order): for a block idle e seconds
  the same ratio over the intervals longer than e, the horizon h = τ_g (or ``horizon_s``)
  counted from now: roi_g(e) = (W_g + k·p_*)·b / (H_g + k·m_*), W_g = |{r ∈ R_g: e < r ≤
  e + h}|, H_g = Σ_{r ∈ R_g, r > e} min(r − e, h), p_* and m_* the pooled window's
  P(D ≤ e + h | D > e) and E[min(D − e, h) | D > e].  At e = 0, k = 0 it is roi_g; as the
  block sits idle past a group's usual gaps it falls (to the pooled value, or to 0 at
  k = 0), so an idle group no longer outlives one just used on an old average (issue 37).
  The conditional count is the admission rule's (``reference.history.back_within``).
* Refit: after every ``refit_every``-th access (and on ``refit()``) the TTLs and ROIs of all
  remembered groups are recomputed from the windows *as they stand*, and the TTLs are applied
  to the tree (``set_group_ttls``).  Between refits ``ttl_s``, ``roi`` and ``back_value`` use
  the windows as of the last refit, and each fit uses only accesses already made: no
  hindsight.

**Bounded memory**: the tree holds at most ``max_blocks`` blocks and remembers at most
``max_idle_groups`` groups without blocks, each with at most ``window`` intervals; the fit
keeps one TTL, one ROI and a sorted copy of the window (with its prefix sums) per group the
tree remembered at the last refit, and the pooled windows sorted.

The shadow tree is a model of the tier (capacity ``max_blocks``, expiry by the fitted TTLs,
LRU when full), so ``access`` returns the hits that tier would have had.  An engine whose
tier is held elsewhere (vLLM's CPU offloading) uses the TTLs and ROIs and ignores the hits.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence, Sized
from typing import Any

import numpy as np

from .._backend import native
from .._validate import int_in, non_negative
from ..reference import prefix_tree as _ref_prefix_tree
from ..reference import solver as _ref_solver
from ..reference.history import back_within
from ..reference.prefix_tree import MAX_GROUP_DEPTH, MAX_IDLE_GROUPS, MAX_NODES, MAX_WINDOW

MAX_REFIT_EVERY = 1 << 30
MAX_PRIOR_WEIGHT = 1e6
#: k: a group's fit counts the pooled windows as this many intervals (chosen on the shipped
#: sample sessions and Mooncake, docs/investigations/sglang-host-tier.md).
DEFAULT_PRIOR_WEIGHT = 8.0
#: Points of the pooled window a group's shrunk fit tries as TTLs (besides its own samples).
POOLED_SKETCH = 32
BACKENDS = ("auto", "rust", "python")


def _backend_module(backend: str) -> Any:
    """The module whose PrefixTree and solve_ttl serve ``backend``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "python" or (backend == "auto" and native is None):
        return _Reference
    if native is None:
        raise ValueError("backend 'rust' asked for, but the native module is not built")
    return native


class _Reference:
    PrefixTree = _ref_prefix_tree.PrefixTree
    solve_ttl = staticmethod(_ref_solver.solve_ttl)


def roi_at(samples_s: Sequence[float], tau_s: float, benefit: float) -> float:
    """roi = P(τ)·b / mean(min(r, τ)) over the window (module docstring)."""
    if not samples_s:
        return 0.0
    n = len(samples_s)
    gain = sum(1 for r in samples_s if r <= tau_s) / n * benefit
    if gain <= 0.0:
        return 0.0
    held_s = sum(min(r, tau_s) for r in samples_s) / n
    return gain / held_s if held_s > 0.0 else math.inf


def pooled_sketch(pooled_sorted: list[float], tau_s: float) -> list[float]:
    """The TTLs a shrunk fit tries from the pooled window: ``POOLED_SKETCH`` of its quantiles
    and its own TTL τ_*, sorted."""
    n = len(pooled_sorted)
    if n == 0:
        return []
    picks = {pooled_sorted[min(n - 1, (i * n) // POOLED_SKETCH)] for i in range(POOLED_SKETCH)}
    picks.add(pooled_sorted[-1])
    picks.add(tau_s)
    return sorted(picks)


def shrunk_ttl(
    own: list[float],
    pooled: list[float],
    sketch: list[float],
    k: float,
    benefit: float,
    price: float,
    cap: float,
) -> float:
    """argmax_{τ ≤ cap} P(τ)·b − c·τ with P = (n·P_g + k·P_*)/(n + k): the group's CDF
    (``own``, sorted, n samples) shrunk toward the pooled one by the prior weight k.  Tries 0,
    the group's samples and the pooled sketch; ties go to the smaller τ."""
    n = len(own)
    w = n / (n + k)
    m = len(pooled)
    best_tau, best_value = 0.0, -math.inf
    for tau in sorted({0.0, *own, *sketch}):
        if tau > cap:
            break
        p = w * (bisect.bisect_right(own, tau) / n) + (1.0 - w) * (
            bisect.bisect_right(pooled, tau) / m
        )
        value = p * benefit - price * tau
        if value > best_value:
            best_tau, best_value = tau, value
    return best_tau


def shrunk_ttls(
    windows: list[list[float]], pooled: list[float], sketch: list[float], terms: tuple[float, ...]
) -> list[float]:
    """``shrunk_ttl`` of each window (sorted, non-empty) at once, ``terms`` its last four
    arguments (k, benefit, price, cap); the same floats.  A refit of thousands of groups runs
    on an engine's step (every ``refit_every``-th finished request), where the loop costs
    ~14 µs a group.  Each group's candidates (0, its samples, the sketch) are sorted by
    (group, τ) and deduplicated; its count of samples <= τ comes from the same sort (its
    samples go ahead of equal candidates), the pooled count from one ``searchsorted``; then
    the same arithmetic in the same order, and the first best τ."""
    k, benefit, price, cap = terms
    n_groups = len(windows)
    if n_groups == 0:
        return []
    sizes = np.fromiter(map(len, windows), dtype=np.int64, count=n_groups)
    own = np.fromiter((r for w in windows for r in w), dtype=np.float64, count=int(sizes.sum()))
    own_group = np.repeat(np.arange(n_groups), sizes)
    sk = np.asarray(sketch, dtype=np.float64)
    taus = np.concatenate([np.zeros(n_groups), own, np.tile(sk, n_groups)])
    groups = np.concatenate(
        [np.arange(n_groups), own_group, np.repeat(np.arange(n_groups), len(sk))]
    )
    # samples (kind 0) ahead of candidates (kind 1) at an equal τ: a candidate's count of its
    # group's samples before it is its count of samples <= τ
    kinds = np.concatenate([np.ones(taus.size, dtype=np.int8), np.zeros(own.size, dtype=np.int8)])
    all_taus = np.concatenate([taus, own])
    all_groups = np.concatenate([groups, own_group])
    order = np.lexsort((kinds, all_taus, all_groups))
    is_sample = kinds[order] == 0
    before = np.cumsum(is_sample) - is_sample  # samples ahead, over all groups
    starts = np.concatenate([[0], np.cumsum(sizes + 1 + len(sk) + sizes)[:-1]])
    ahead_in_group = before - before[starts][all_groups[order]]
    cand = ~is_sample
    tau = all_taus[order][cand]
    g = all_groups[order][cand]
    below = ahead_in_group[cand]
    keep = tau <= cap
    first = np.ones(tau.size, dtype=bool)  # (a set: one candidate per distinct τ)
    first[1:] = (g[1:] != g[:-1]) | (tau[1:] != tau[:-1])
    keep &= first
    tau, g, below = tau[keep], g[keep], below[keep]
    n = sizes[g]
    w = n / (n + k)
    m = len(pooled)
    pooled_below = np.searchsorted(np.asarray(pooled, dtype=np.float64), tau, side="right")
    p = w * (below / n) + (1.0 - w) * (pooled_below / m)
    value = p * benefit - price * tau
    best = np.full(n_groups, -np.inf)
    np.maximum.at(best, g, value)
    at_best = np.flatnonzero(value == best[g])
    _, first_best = np.unique(g[at_best], return_index=True)
    return tau[at_best[first_best]].tolist()


def _prefix_sums(sorted_s: list[float]) -> list[float]:
    """[0, x0, x0 + x1, …]: sums of the first i durations."""
    out = [0.0]
    for x in sorted_s:
        out.append(out[-1] + x)
    return out


def _counts_and_held(
    sorted_s: list[float], sums: list[float], e: float, h: float, within: int, longer: int
) -> tuple[float, float]:
    """(within, Σ_{r > e} min(r − e, h)) over sorted durations with prefix sums ``sums``,
    given ``back_within``'s counts."""
    n = len(sorted_s)
    first = n - longer  # the first duration > e
    end = first + within  # past the last one <= e + h
    return float(within), (sums[end] - sums[first]) - e * within + h * (n - end)


def _back_and_hold(
    sorted_s: list[float], sums: list[float], e: float, h: float
) -> tuple[float, float]:
    """(P(D <= e + h | D > e), E[min(D − e, h) | D > e]) over sorted durations; (0, 0) when
    none is longer than e."""
    within, longer = back_within(sorted_s, e, h)
    if not longer:
        return 0.0, 0.0
    w, held = _counts_and_held(sorted_s, sums, e, h, within, longer)
    return w / longer, held / longer


class OnlineGroupTTL:
    """Per-group TTLs and ROIs refitted online every ``refit_every`` accesses (module doc)."""

    def __init__(
        self,
        benefit_per_hit: Any,
        price_per_block_s: Any,
        max_ttl_s: Any,
        *,
        refit_every: Any = 64,
        max_blocks: Any = 1 << 20,
        group_depth: Any = 2,
        window: Any = 256,
        max_idle_groups: Any = 1 << 16,
        prior_weight: Any = DEFAULT_PRIOR_WEIGHT,
        horizon_s: Any = None,
        backend: str = "auto",
    ) -> None:
        self.benefit_per_hit = non_negative("benefit_per_hit", benefit_per_hit)
        self.price_per_block_s = non_negative("price_per_block_s", price_per_block_s)
        self.max_ttl_s = non_negative("max_ttl_s", max_ttl_s)
        self.refit_every = int_in("refit_every", refit_every, 1, MAX_REFIT_EVERY)
        self.prior_weight = non_negative("prior_weight", prior_weight)
        if self.prior_weight > MAX_PRIOR_WEIGHT:
            raise ValueError(
                f"prior_weight must be at most {MAX_PRIOR_WEIGHT:g}, got {prior_weight!r}"
            )
        self.horizon_s = None if horizon_s is None else non_negative("horizon_s", horizon_s)
        self.group_depth = int_in("group_depth", group_depth, 1, MAX_GROUP_DEPTH)
        max_blocks = int_in("max_blocks", max_blocks, 1, MAX_NODES)
        window = int_in("window", window, 1, MAX_WINDOW)
        max_idle_groups = int_in("max_idle_groups", max_idle_groups, 0, MAX_IDLE_GROUPS)
        impl = _backend_module(backend)
        self._solve_ttl = impl.solve_ttl
        self.tree = impl.PrefixTree(
            max_nodes=max_blocks,
            group_depth=self.group_depth,
            window=window,
            max_idle_groups=max_idle_groups,
            default_ttl_s=self.max_ttl_s,
        )
        self._ttl_s: dict[tuple[int, ...], float] = {}
        self._roi: dict[tuple[int, ...], float] = {}
        self._pooled = (self.max_ttl_s, 0.0)  # (τ_*, roi_*) for groups without intervals
        self._sorted: dict[tuple[int, ...], list[float]] = {}  # each group's window, sorted
        self._pooled_sorted: list[float] = []
        self._sums: dict[tuple[int, ...], list[float]] = {}  # prefix sums of those
        self._pooled_sums: list[float] = [0.0]
        self.accesses = 0
        self.refits = 0
        self.hit_blocks = 0
        self.accessed_blocks = 0

    # ---- updates --------------------------------------------------------------------------

    def access(self, hash_ids: Any, now: Any) -> int:
        """Record one access to ``hash_ids`` (head first) at ``now``; returns how many leading
        blocks the shadow tier held.  Refits after every ``refit_every``-th access."""
        if not isinstance(hash_ids, (str, bytes, Sized)) and isinstance(hash_ids, Iterable):
            hash_ids = list(hash_ids)  # a one-shot iterator: counted below after the insert
        hits = self.tree.insert(hash_ids, now)  # validates both; changes nothing on error
        self.accesses += 1
        self.hit_blocks += hits
        self.accessed_blocks += len(hash_ids)
        if self.accesses % self.refit_every == 0:
            self.refit()
        return hits

    def expire(self, now: Any) -> int:
        """Drop the shadow tree's blocks past their group's TTL; returns how many."""
        return self.tree.expire(now)

    def refit(self) -> None:
        """Refit every remembered group's TTL and ROI from its window as it stands now."""
        b, c, cap, k = (
            self.benefit_per_hit,
            self.price_per_block_s,
            self.max_ttl_s,
            self.prior_weight,
        )
        groups = self.tree.groups()
        pooled = sorted(r for g in groups for r in g.reuse_s)
        shrink = k > 0.0 and bool(pooled)
        # τ_g from its window alone: only where no group is shrunk toward the pooled fit
        fitted = {} if shrink else self.tree.group_ttls(b, c, cap)
        if pooled:
            tau_s = self._solve_ttl(pooled, b, c, cap)[0]
            self._pooled = (tau_s, roi_at(pooled, tau_s, b))
        else:
            self._pooled = (cap, 0.0)
        sketch = pooled_sketch(pooled, self._pooled[0])
        ttl_s: dict[tuple[int, ...], float] = {}
        roi: dict[tuple[int, ...], float] = {}
        windows: dict[tuple[int, ...], list[float]] = {}
        for g in groups:
            if g.reuse_s:
                windows[tuple(g.key)] = sorted(g.reuse_s)
        if shrink:
            shrunk = shrunk_ttls(list(windows.values()), pooled, sketch, (k, b, c, cap))
            fitted = dict(zip(windows, shrunk, strict=True))
        for g in groups:
            key = tuple(g.key)
            if g.reuse_s:
                ttl_s[key] = fitted[key]
                roi[key] = roi_at(g.reuse_s, ttl_s[key], b)
            else:
                ttl_s[key], roi[key] = self._pooled
        self._ttl_s, self._roi, self._sorted, self._pooled_sorted = ttl_s, roi, windows, pooled
        self._sums = {key: _prefix_sums(w) for key, w in windows.items()}
        self._pooled_sums = _prefix_sums(pooled)
        self.tree.set_group_ttls(ttl_s)
        self.refits += 1

    # ---- queries --------------------------------------------------------------------------

    def group_key(self, hash_ids: Any) -> tuple[int, ...]:
        """The group of the last block of ``hash_ids``: its first ``group_depth`` hashes."""
        if isinstance(hash_ids, (str, bytes)) or not isinstance(hash_ids, Iterable):
            raise TypeError(
                f"hash_ids must be a sequence of integers, got {type(hash_ids).__name__}"
            )
        head = list(hash_ids)[: self.group_depth]
        if not head:
            raise ValueError("hash_ids must hold at least one hash to name a group")
        return tuple(_ref_prefix_tree.check_hashes("hash_ids", head))

    def ttl_s(self, hash_ids_or_key: Any) -> float:
        """The TTL of the group of ``hash_ids_or_key``, as of the last refit."""
        return self._ttl_s.get(self.group_key(hash_ids_or_key), self._pooled[0])

    def roi(self, hash_ids_or_key: Any) -> float:
        """Value per block-second of keeping that group, as of the last refit (module doc)."""
        return self._roi.get(self.group_key(hash_ids_or_key), self._pooled[1])

    def eviction_rank(
        self,
        group: tuple[int, ...] | None,
        last_access_s: float,
        now: float,
        *,
        ended_s: float | None = None,
        waiting_until_s: float | None = None,
    ) -> tuple[float, ...]:
        """Where a tier's cached block of ``group`` (a key as ``group_key`` gives it), last
        used at ``last_access_s``, stands in the tier's eviction order at ``now``: the block
        with the smallest rank goes first.  The one rule of the engines' host tiers:

        * ``(0, deadline)`` — expired (idle past its group's TTL) or its program ended
          (``ended_s``): the oldest deadline first;
        * ``(1, value, last_access_s)`` — live: the least ``value`` first (``back_value``:
          the group's value per block-second given how long the block has been idle), least
          recently used among equals;
        * ``(2, value, last_access_s)`` — its program waits on a tool until
          ``waiting_until_s`` (later than ``now``): after every live block.

        ``group`` None or empty: stored by a request still running, whose group is not known
        yet: it expires by the pooled TTL from ``last_access_s`` and, until then, goes after
        every live group (it will most likely be reused)."""
        if ended_s is not None:
            return (0.0, ended_s)
        pooled_ttl_s = self._pooled[0]
        if not group:
            deadline = last_access_s + pooled_ttl_s
            return (0.0, deadline) if deadline < now else (1.0, math.inf, last_access_s)
        deadline = last_access_s + self._ttl_s.get(group, pooled_ttl_s)
        if deadline < now:
            return (0.0, deadline)
        value = self.back_value(group, now - last_access_s)
        if waiting_until_s is not None and waiting_until_s > now:
            return (2.0, value, last_access_s)
        return (1.0, value, last_access_s)

    def back_value(self, group: tuple[int, ...], idle_s: float) -> float:
        """Value per block-second of keeping a block of ``group`` that has been idle
        ``idle_s`` seconds, as of the last refit: roi_g(e) of the module doc (the window's
        ROI over the intervals longer than e, shrunk toward the pooled one by
        ``prior_weight``).  0 when nothing recorded lasted that long (at k = 0); +inf when a
        return is certain and holds nothing."""
        e = idle_s if idle_s > 0.0 else 0.0
        own = self._sorted.get(group)
        h = self._ttl_s.get(group, self._pooled[0]) if self.horizon_s is None else self.horizon_s
        k = self.prior_weight
        p_pooled, held_pooled = 0.0, 0.0
        if k > 0.0 and self._pooled_sorted:
            p_pooled, held_pooled = _back_and_hold(self._pooled_sorted, self._pooled_sums, e, h)
        within, held = 0.0, 0.0
        if own is not None:
            w, longer = back_within(own, e, h)
            if longer:
                within, held = _counts_and_held(own, self._sums[group], e, h, w, longer)
        gain = (within + k * p_pooled) * self.benefit_per_hit
        if gain <= 0.0:
            return 0.0
        hold = held + k * held_pooled
        return gain / hold if hold > 0.0 else math.inf

    def pooled(self) -> tuple[float, float]:
        """(τ_*, roi_*): what a group without intervals of its own gets."""
        return self._pooled

    def fitted_groups(self) -> int:
        """Groups with a TTL of their own from the last refit."""
        return len(self._ttl_s)

    def block_seconds(self, now: Any) -> float:
        """Block-seconds the shadow tier held so far (``PrefixTree.block_seconds``)."""
        return self.tree.block_seconds(now)

    @property
    def expired_blocks(self) -> int:
        return self.tree.expired_blocks

    @property
    def evicted_blocks(self) -> int:
        return self.tree.evicted_blocks

    def __len__(self) -> int:
        return len(self.tree)
