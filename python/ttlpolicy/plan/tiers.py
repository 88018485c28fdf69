"""A tiered KV store (HBM → DRAM → SSD) keyed by prefix hash, and an open-loop replay of a block
trace through it on one engine instance — what ``ttlpolicy plan`` evaluates per configuration.

**Store.**  A block (one key of ``traces.cache.BlockTrace``) lives in at most one tier.  A request
matches the longest prefix of its keys held in any tier (a block in DRAM after one in HBM still
counts: the prefix is whole).  Matched blocks below HBM are *promoted* (loaded into HBM, leaving
their tier); then every block of the request is in HBM, most recently used, its head most recent
(so a request's tail is evicted first, as vLLM frees blocks in reverse).  A tier over capacity
*demotes* its least recently stored block to the next tier (HBM → DRAM → SSD → dropped); a tier
of capacity 0 passes blocks straight through.  Per-tier policy below HBM (HBM is always LRU:
the engine's prefix cache):

* ``lru`` — kept until capacity pushes it down;
* ``ttl`` — also demoted ``ttl_s`` after it landed in the tier (one global TTL);
* ``group`` — also demoted after its *group's* TTL, chosen by return on investment by an online
  tuner that sees only the past (``GroupTTLSource``; see ``groups.sources``).

**Time.**  One engine instance serves requests first come first served: a request is picked up
at ``max(arrival, engine free)``; then its prefix is looked up, the matched blocks below HBM are
loaded (per tier: latency + bytes / read bandwidth, the bandwidth capped by the GPU's host
links; loads are not overlapped with compute), the rest is prefilled (``Hardware.prefill_s``,
chunked at ``token_budget``, attending to the cached prefix), and the first token is out: TTFT
= that − arrival.  Decode is continuous-batched: a request's ``out`` tokens cost ``out`` decode
steps of a batch of ``decode_batch`` requests of its context, divided by the batch (its share),
after which the engine takes the next request.  Throughput = output tokens / (last finish −
first arrival).  Demotion writes are asynchronous (not on the critical path).

**Holding.**  Block-seconds held per tier are integrated (a TTL demotion is charged up to its
deadline), so a cost per GB-hour held can be charged as well as one per GB provisioned.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..sim.hardware import Hardware
from ..traces.cache import BlockTrace

POLICIES = ("lru", "ttl", "group")


class GroupTTLSource(Protocol):
    """An online group-TTL tuner, as the store needs it: it sees each request's keys as it is
    served and answers, for a block, its group and that group's current TTL on a tier (index
    into the store's ``tiers``: each tier has its own price, hence its own TTLs)."""

    def observe(self, keys: Sequence[int], now: float) -> None: ...

    def group_of(self, keys: Sequence[int], index: int) -> Hashable: ...

    def ttl_of(self, group: Hashable, tier: int) -> float: ...


@dataclass(frozen=True, slots=True)
class Tier:
    """One tier below HBM."""

    name: str
    capacity_blocks: int
    read_bytes_per_s: float  # math.inf: not the limit
    latency_s: float
    policy: str = "lru"
    ttl_s: float = math.inf  # policy "ttl"

    def __post_init__(self) -> None:
        if not isinstance(self.capacity_blocks, int) or self.capacity_blocks < 0:
            raise ValueError(
                f"tier {self.name}: capacity_blocks must be an integer >= 0, "
                f"got {self.capacity_blocks!r}"
            )
        if not self.read_bytes_per_s > 0:
            raise ValueError(
                f"tier {self.name}: read_bytes_per_s must be > 0, got {self.read_bytes_per_s!r}"
            )
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"tier {self.name}: latency_s must be >= 0, got {self.latency_s!r}")
        if self.policy not in POLICIES:
            raise ValueError(
                f"tier {self.name}: policy must be one of {', '.join(POLICIES)}, "
                f"got {self.policy!r}"
            )
        if self.policy == "ttl" and not self.ttl_s >= 0:
            raise ValueError(f"tier {self.name}: ttl_s must be >= 0, got {self.ttl_s!r}")


class TieredStore:
    """HBM (LRU) above ``tiers``; see the module doc.  Tier 0 is HBM."""

    def __init__(
        self,
        hbm_blocks: int,
        tiers: Sequence[Tier],
        groups: GroupTTLSource | None = None,
    ) -> None:
        if not isinstance(hbm_blocks, int) or hbm_blocks < 1:
            raise ValueError(f"hbm_blocks must be an integer >= 1, got {hbm_blocks!r}")
        self.tiers = list(tiers)
        for t in self.tiers:
            if t.policy == "group" and groups is None:
                raise ValueError(f"tier {t.name}: policy 'group' needs a group TTL source")
        self._groups_src = groups
        self.capacity = [hbm_blocks] + [t.capacity_blocks for t in self.tiers]
        self.policy = ["lru"] + [t.policy for t in self.tiers]
        self.ttl_s = [math.inf] + [t.ttl_s if t.policy == "ttl" else math.inf for t in self.tiers]
        n = len(self.capacity)
        self.where: dict[int, int] = {}  # key → tier
        # key → deadline (lru/ttl: insertion order is LRU order; ttl deadlines increase in it)
        self.order: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(n)]
        self._heap: list[list[tuple[float, int, int]]] = [[] for _ in range(n)]  # group policy
        self._stamp: dict[int, int] = {}
        self._seq = 0
        self._group: dict[int, Hashable] = {}  # key → group, for tiers with policy "group"
        self.block_s = [0.0] * n
        self._t = 0.0
        self.demoted = [0] * n  # blocks pushed out of each tier
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.where)

    # -- time -------------------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Integrate holding up to ``now`` and apply TTL demotions due by then."""
        if now < self._t:
            raise ValueError(f"now must not go back in time: {now!r} after {self._t!r}")
        dt = now - self._t
        if dt:
            for t, od in enumerate(self.order):
                self.block_s[t] += len(od) * dt
        self._t = now
        for t in range(1, len(self.capacity)):
            if self.policy[t] == "ttl":
                od = self.order[t]
                while od:
                    key, deadline = next(iter(od.items()))
                    if deadline >= now:
                        break
                    del od[key]
                    self._expired(key, t, deadline, now)
            elif self.policy[t] == "group":
                heap, od = self._heap[t], self.order[t]
                while heap and heap[0][0] < now:
                    deadline, seq, key = heapq.heappop(heap)
                    if self.where.get(key) == t and self._stamp.get(key) == seq:
                        del od[key]
                        self._expired(key, t, deadline, now)

    def _expired(self, key: int, t: int, deadline: float, now: float) -> None:
        self.block_s[t] -= now - deadline  # charged until its deadline only
        self.demoted[t] += 1
        self._place(key, t + 1, deadline)
        nt = self.where.get(key)
        if nt is not None:
            self.block_s[nt] += now - deadline

    # -- placement --------------------------------------------------------------------------
    def _deadline(self, key: int, t: int, at: float) -> float:
        pol = self.policy[t]
        if pol == "ttl":
            return at + self.ttl_s[t]
        if pol == "group":
            ttl = self._groups_src.ttl_of(self._group[key], t - 1)  # type: ignore[union-attr]
            d = at + ttl
            if d != math.inf:
                self._seq += 1
                self._stamp[key] = self._seq
                heapq.heappush(self._heap[t], (d, self._seq, key))
            return d
        return math.inf

    def _place(self, key: int, t: int, at: float) -> None:
        """Store ``key`` (held nowhere) in tier ``t`` or below, demoting what overflows."""
        n = len(self.capacity)
        while True:
            while t < n and self.capacity[t] == 0:
                t += 1
            if t >= n:
                self.where.pop(key, None)
                self._group.pop(key, None)
                self.dropped += 1
                return
            od = self.order[t]
            od[key] = self._deadline(key, t, at)
            self.where[key] = t
            if len(od) <= self.capacity[t]:
                return
            key, _ = od.popitem(last=False)
            self.demoted[t] += 1
            t += 1

    # -- a request --------------------------------------------------------------------------
    def lookup(self, keys: Sequence[int]) -> list[int]:
        """Blocks of the held prefix of ``keys``, per tier (HBM first).  Changes nothing."""
        counts = [0] * len(self.capacity)
        where = self.where
        for k in keys:
            t = where.get(k)
            if t is None:
                break
            counts[t] += 1
        return counts

    def admit(self, keys: Sequence[int], matched: int, now: float) -> None:
        """After a request's prefill: every key in HBM; ``matched`` leading keys were hits."""
        where, order, hbm = self.where, self.order, self.order[0]
        src = self._groups_src
        if src is not None:
            src.observe(keys, now)
            groups = self._group
            for i in range(len(keys)):
                if i >= matched or keys[i] not in groups:
                    groups[keys[i]] = src.group_of(keys, i)
        for i in range(len(keys) - 1, -1, -1):
            k = keys[i]
            t = where.get(k)
            if t == 0:
                hbm.move_to_end(k)
                continue
            if t is not None:
                del order[t][k]
            hbm[k] = math.inf
            where[k] = 0
        cap = self.capacity[0]
        while len(hbm) > cap:
            k, _ = hbm.popitem(last=False)
            self.demoted[0] += 1
            self._place(k, 1, now)

    def check(self) -> None:
        """Books balance and no tier exceeds its capacity (for tests)."""
        assert sum(len(od) for od in self.order) == len(self.where)
        for t, od in enumerate(self.order):
            assert len(od) <= self.capacity[t], (t, len(od), self.capacity[t])
            for k in od:
                assert self.where[k] == t


@dataclass
class TierMetrics:
    requests: int = 0
    output_tokens: int = 0
    input_tokens: int = 0
    hit_tokens: list[int] = field(default_factory=list)  # per tier
    prefill_tokens: int = 0
    load_s: float = 0.0
    makespan_s: float = 0.0
    ttfts_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    block_s: list[float] = field(default_factory=list)  # per tier

    def summary(self) -> dict[str, float]:
        span = self.makespan_s or 1.0
        tt = self.ttfts_s
        return {
            "requests": float(self.requests),
            "throughput_tok_s": self.output_tokens / span,
            "ttft_mean_s": float(tt.mean()) if len(tt) else 0.0,
            "ttft_p99_s": float(np.percentile(tt, 99)) if len(tt) else 0.0,
            "hit_rate": sum(self.hit_tokens) / self.input_tokens if self.input_tokens else 0.0,
            "hbm_hit_rate": self.hit_tokens[0] / self.input_tokens if self.input_tokens else 0.0,
            "load_s": self.load_s,
            "makespan_s": self.makespan_s,
        }


def replay(
    trace: BlockTrace,
    hw: Hardware,
    store: TieredStore,
    *,
    token_budget: int = 8192,
    decode_batch: int = 32,
) -> TierMetrics:
    """Serve ``trace`` open loop on one engine instance with ``store`` (see the module doc)."""
    if decode_batch < 1:
        raise ValueError(f"decode_batch must be >= 1, got {decode_batch!r}")
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget!r}")
    bt = trace.block_tokens
    block_bytes = hw.kv_bytes_per_token * bt
    link = hw.gpu.pcie_bytes_per_s * hw.model.tp
    load_per_block = [0.0] + [block_bytes / min(t.read_bytes_per_s, link) for t in store.tiers]
    latency = [0.0] + [t.latency_s for t in store.tiers]
    n_tiers = len(store.capacity)
    steps = hw.steps
    arrival = trace.arrival_s.tolist()
    inputs = trace.input_tokens.tolist()
    outputs = trace.output_tokens.tolist()
    offsets = trace.offsets.tolist()
    keys_all = trace.keys
    n = len(arrival)
    ttft = np.empty(n)
    m = TierMetrics(requests=n, hit_tokens=[0] * n_tiers)
    free = arrival[0] if n else 0.0
    load_total = 0.0
    prefill_cache: dict[tuple[int, int], float] = {}
    for i in range(n):
        now = arrival[i]
        t = now if now > free else free
        store.advance(t)
        keys = keys_all[offsets[i] : offsets[i + 1]].tolist()
        counts = store.lookup(keys)
        inp = inputs[i]
        hit_blocks = sum(counts)
        hit = min(hit_blocks * bt, inp - 1) if inp > 0 else 0
        load = 0.0
        over = hit_blocks * bt - hit  # the last token is always computed
        for tier in range(n_tiers - 1, -1, -1):
            c = counts[tier]
            if c:
                if tier:
                    load += latency[tier] + c * load_per_block[tier]
                cut = min(over, c * bt)
                m.hit_tokens[tier] += c * bt - cut
                over -= cut
        miss = inp - hit
        pk = (miss, hit)
        pre = prefill_cache.get(pk)
        if pre is None:
            pre = hw.prefill_s(miss, token_budget, start=hit)
            if len(prefill_cache) < 1 << 16:
                prefill_cache[pk] = pre
        first = t + load + pre
        ttft[i] = first - now
        out = outputs[i]
        ctx = inp + out / 2.0
        dec = (
            out
            * steps.step_s(decode_batch, decode_batch * ctx, decode_batch * ctx, decode_batch)
            / decode_batch
        )
        free = first + dec
        load_total += load
        m.input_tokens += inp
        m.output_tokens += out
        m.prefill_tokens += miss
        store.admit(keys, hit_blocks, t)
    if n:
        store.advance(max(free, store._t))
        m.makespan_s = free - arrival[0]
    m.ttfts_s = ttft
    m.load_s = load_total
    m.block_s = list(store.block_s)
    return m
