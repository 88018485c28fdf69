"""Block-granular KV memory with prefix reuse, an LRU free queue and an optional CPU tier.

A program runs one LLM call at a time and each call's context extends the previous one's, so
a program's reusable KV is one *chain*: the leading full blocks of its last call's KV (input
and output, as vLLM caches them).  A
returning call reuses the common prefix (by block hash, computed when the workload is built)
of its input with that chain.  The chain is in one of four states:

* ``held`` — referenced by the program's running call, never evicted;
* ``pinned`` — kept by a policy while the program is away (a TTL pin, InferCept's preserve);
  when the program's next call arrives the pin ends and the chain joins the free queue at
  its most-recently-used end, where admission finds it (a waiting call holds no memory) —
  or, for policies that hand the pin over at admission, the call takes it directly;
* ``free`` — released but still reusable, in an LRU queue as vLLM's prefix cache keeps freed
  blocks: eviction takes the least recently freed chain first, its tail blocks first (vLLM
  frees a request's blocks in reverse order), and a chain may be partly evicted;
* on the CPU tier, when one is configured: blocks evicted from the GPU chain (or swapped out
  whole) stay reloadable there, as a contiguous run after the GPU part, LRU as well.

Blocks beyond the chain (the partial last block) are private to the call and freed when it
ends.  ``free_blocks + cached_blocks + used_blocks == capacity``
always; nothing ever exceeds the capacity.

**The common prefix** (tool definitions and system prompt every session sends; the workload's
``Program.common_blocks``, told here by ``share``): a program's first ``common[program]``
chain blocks are the first blocks of one *common chain*, stored once.  Each running call or
pin holds it to a depth (its own common blocks, as far as they are on the GPU); the common
chain's blocks up to the deepest hold are counted once in ``used`` and never evicted, those
past it are one entry of the free queue (``COMMON``), evicted tail first like any chain and
LRU by when the last hold on them ended (under a policy's eviction order: after every
program's chain).  A program's own books (``_free``, ``_pins``, CPU-tier run) keep the blocks
past its common part only; ``pinned`` counts those.  Blocks a call computes past the common
chain's end join it when the call ends.  The common chain is never written to the CPU tier.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable

from .interface import Verdict

# (a member read through the Enum class costs a metaclass lookup: ~0.1 µs per release)
_PIN, _SWAP = Verdict.PIN, Verdict.SWAP
#: the free-queue key of the common chain's unheld blocks (no program id starts with NUL)
COMMON = "\0common"


class KVCache:
    def __init__(self, capacity_blocks: int, cpu_capacity_blocks: int = 0) -> None:
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks!r}")
        self.capacity = capacity_blocks
        self.cpu_capacity = cpu_capacity_blocks
        self.used = 0  # held + pinned + private blocks
        self.pinned = 0
        self.cached = 0  # free chains
        self._free: OrderedDict[str, int] = OrderedDict()  # program → blocks, LRU first
        self._chain: dict[str, int] = {}  # program → GPU chain blocks, any state
        self._pins: dict[str, int] = {}
        self._cpu: OrderedDict[str, tuple[int, int]] = OrderedDict()  # program → [start, end)
        self.cpu_used = 0
        self.evicted_blocks = 0
        self.offloaded_blocks = 0
        self.prefetched_blocks = 0
        # program → when its prefetched chain (``prefetch``) is fully on the GPU; an entry
        # lives until the program's call is admitted (``take``) or its chain is gone
        self.loading: dict[str, float] = {}
        # A policy's eviction order of free chains (programs, first to go first); None: LRU.
        # It must sort by a key of each program's own (then the order of a subset is the
        # same order with the others left out), and the engine relies on it.
        self.eviction_order: Callable[[list[str]], list[str]] | None = None
        # the common prefix (module doc): program → its blocks of the common chain, the
        # chain's GPU blocks, each holder's depth, holders per depth and the deepest hold
        self.common: dict[str, int] = {}
        self.common_blocks = 0
        self._holds: dict[str, int] = {}
        self._depths: dict[int, int] = {}
        self.common_held = 0

    # -- views ----------------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        return self.capacity - self.used - self.cached

    def available(self) -> int:
        """Blocks an allocation can get now, evicting free chains as needed."""
        return self.capacity - self.used

    def available_for(self, program: str) -> int:
        """``available()`` to a call of ``program``: its own pinned chain counts as room (a
        pin handed over when the call is admitted, the paper's rule), and so do the blocks
        of its common prefix already held (by anyone: stored once)."""
        room = self.capacity - self.used + self._pins.get(program, 0)
        if self.common:
            room += self._held_common(program)
        return room

    @property
    def pins_held(self) -> int:
        """How many programs hold a pin now (``pinned`` counts their blocks)."""
        return len(self._pins)

    def chain_blocks(self, program: str) -> int:
        """The program's reusable GPU chain (its common prefix included)."""
        if self.common:
            return self._gpu_chain(program)
        return self._chain.get(program, 0)

    def free_chains(self) -> dict[str, int]:
        """The free (evictable) chains: program → blocks, least recently freed first (the
        common chain's unheld blocks are no program's)."""
        if COMMON not in self._free:
            return dict(self._free)
        return {p: n for p, n in self._free.items() if p != COMMON}

    def free_programs(self) -> list[str]:
        """The programs whose chains are free (evictable), least recently freed first."""
        if COMMON not in self._free:
            return list(self._free)
        return [p for p in self._free if p != COMMON]

    # -- the common prefix ----------------------------------------------------------------
    def share(self, program: str, common_blocks: int) -> None:
        """The program's first ``common_blocks`` blocks are the common prefix (module doc)."""
        if common_blocks < 0:
            raise ValueError(f"common_blocks must be >= 0, got {common_blocks!r}")
        if common_blocks:
            self.common[program] = common_blocks
        else:
            self.common.pop(program, None)

    def _gpu_chain(self, program: str) -> int:
        """The program's chain as far as it is on the GPU and joined: its common part
        (stops where the common chain does), then its own blocks."""
        own = self._chain.get(program, 0)
        p = self.common.get(program, 0)
        if not p:
            return own
        shared = self.common_blocks if self.common_blocks < p else p
        return own if shared == p and own > p else shared

    def _held_common(self, program: str) -> int:
        """Blocks of the program's common prefix already counted in ``used`` (held)."""
        p = self.common.get(program, 0)
        return p if p < self.common_held else self.common_held

    def _rehold(self, program: str, depth: int) -> None:
        """The program's call or pin now holds the common chain's first ``depth`` blocks
        (0: none)."""
        old = self._holds.get(program, 0)
        if old == depth:
            return
        depths = self._depths
        deepest = self.common_held
        if old:
            left = depths[old] - 1
            if left:
                depths[old] = left
            else:
                del depths[old]
                if old == deepest:
                    deepest = max(depths, default=0)
        if depth:
            self._holds[program] = depth
            depths[depth] = depths.get(depth, 0) + 1
            if depth > deepest:
                deepest = depth
        else:
            del self._holds[program]
        if deepest != self.common_held:
            self._set_held(deepest)

    def _set_held(self, depth: int) -> None:
        """The deepest hold is now ``depth``: the common chain's blocks up to it are used,
        the rest the free queue's ``COMMON`` entry — moved to its most recently used end
        when blocks were freed, in its place when held deeper (as vLLM's queue does)."""
        was = self.common_held
        self.common_held = depth
        self.used += depth - was
        unheld = self.common_blocks - depth
        old = self._free.get(COMMON, 0)
        self.cached += (unheld if unheld > 0 else 0) - old
        if unheld <= 0:
            self._free.pop(COMMON, None)
            return
        self._free[COMMON] = unheld
        if depth < was:
            self._free.move_to_end(COMMON)

    # -- eviction -------------------------------------------------------------------------
    def _evict(self, need: int) -> None:
        """Evict free chains (LRU, tail first) until ``need`` blocks are free, or none is left."""
        free = self._free
        short = need - (self.capacity - self.used - self.cached)  # need - free_blocks
        if short <= 0 or not free:
            return
        order = None
        if self.eviction_order is not None and len(free) > 1:  # one chain has one order
            if COMMON in free:  # (no program's: every program's chains go first)
                order = iter([*self.eviction_order(self.free_programs()), COMMON])
            else:
                order = iter(self.eviction_order(list(free)))
        while short > 0 and free:
            if order is None:
                program, blocks = next(iter(free.items()))
            else:
                program = next(order)
                blocks = free[program]
            take = blocks if blocks < short else short
            keep = blocks - take
            short -= take
            self.cached -= take
            self.evicted_blocks += take
            if program == COMMON:
                self.common_blocks -= take
                if keep:
                    free[program] = keep
                else:
                    del free[program]
                continue
            # (a chain's first blocks may be the common chain's: its own blocks follow them)
            start = self._chain[program] - blocks
            if keep:
                free[program] = keep
                self._chain[program] = start + keep
            else:
                del free[program]
                self._chain.pop(program, None)
                if self.loading:
                    self.loading.pop(program, None)
            if self.cpu_capacity:
                self.to_cpu(program, start + keep, start + keep + take)

    def to_cpu(self, program: str, start: int, end: int) -> None:
        """Writes blocks ``[start, end)`` of the program's chain, leaving the GPU, to the CPU
        tier: the tier's one way in (the program's run there that begins at ``end`` joins them;
        the least recently written runs give way when the tier is full)."""
        new_start, new_end = start, end  # the blocks written now; a run they extend was earlier
        cpu, capacity, used = self._cpu, self.cpu_capacity, self.cpu_used
        old = cpu.pop(program, None)
        if old is not None:
            used -= old[1] - old[0]
            if old[0] == end:  # the new run continues the old one
                end = old[1]
        length = end - start
        if length > capacity:
            start, length = end - capacity, capacity
            end = start + length
        while used + length > capacity:
            victim, (s, e) = next(iter(cpu.items()))
            over = used + length - capacity
            cut = over if over < e - s else e - s  # (min(), whose builtin parses its arguments)
            used -= cut
            if e - cut > s:
                cpu[victim] = (s, e - cut)
            else:
                del cpu[victim]
        if length:
            cpu[program] = (start, end)
            used += length
            # the blocks written now that the tier keeps (no min/max: see the loop above)
            kept_end = end if end < new_end else new_end
            kept_start = start if start > new_start else new_start
            if kept_end > kept_start:
                self.offloaded_blocks += kept_end - kept_start
        self.cpu_used = used

    # -- a call's life --------------------------------------------------------------------
    def acquire(
        self, program: str, reusable_blocks: int, total_blocks: int
    ) -> tuple[int, int] | None:
        """Admit a call needing ``total_blocks``, all of them allocated now (``hit`` then
        ``take``).  Returns (GPU hit blocks, CPU hit blocks), or None — changing nothing."""
        got = self.hit(program, reusable_blocks, total_blocks)
        if got is not None:
            self.take(program, total_blocks)
        return got

    def hit(self, program: str, reusable_blocks: int, total_blocks: int) -> tuple[int, int] | None:
        """What a call needing ``total_blocks``, whose first ``reusable_blocks`` may come from
        the program's chain, would find cached: (GPU hit blocks, CPU hit blocks); None when
        memory cannot hold the whole prompt even after evicting every free chain (vLLM admits
        a request only when its whole prompt fits, ``scheduler_reserve_full_isl``, although it
        allocates the first chunk alone).  Changes nothing."""
        room = self.capacity - self.used + self._pins.get(program, 0)
        if self.common:
            room += self._held_common(program)
        if total_blocks > room:
            return None  # (more than available_for(program))
        chain = self._gpu_chain(program) if self.common else self._chain.get(program, 0)
        gpu_hit = chain if chain < reusable_blocks else reusable_blocks
        if total_blocks < gpu_hit:
            gpu_hit = total_blocks
        cpu_hit = 0
        run = self._cpu.get(program)
        if run is not None and run[0] == chain and gpu_hit == chain:
            usable = min(run[1], reusable_blocks, total_blocks) - chain
            cpu_hit = usable if usable > 0 else 0
        return gpu_hit, cpu_hit

    def take(self, program: str, blocks: int) -> None:
        """Admit the call ``hit`` was asked about, allocating ``blocks`` now: its hit (which
        ``blocks`` must cover) and its first chunk; the rest comes by ``grow`` chunk by chunk.
        The program's chain leaves the books: its hit blocks become the call's, the stale tail
        past the reusable prefix is simply free; its CPU-tier run is read (or dropped)."""
        run = self._cpu.pop(program, None)
        if run is not None:
            self.cpu_used -= run[1] - run[0]
        if program in self._free:
            self.cached -= self._free.pop(program)
        own_pin = self._pins.pop(program, 0)  # a pin handed over at admission
        if self.loading:
            self.loading.pop(program, None)  # (the engine read it before)
        self.pinned -= own_pin
        self.used -= own_pin
        self._chain.pop(program, None)
        if self.common:
            p = self.common.get(program, 0)
            if p or program in self._holds:
                # the call holds its common prefix, as far as the common chain goes: counted
                # once, not in its own blocks
                held = min(p, self.common_blocks, blocks)
                self._rehold(program, held)
                blocks -= held
        self._evict(blocks)
        self.used += blocks

    def grow(self, blocks: int) -> bool:
        """Running calls need ``blocks`` more (a prefill chunk, decode); False, changing
        nothing, if impossible."""
        free = self.capacity - self.used
        if blocks > free:  # available()
            return False
        if blocks > free - self.cached:  # free_blocks
            self._evict(blocks)
        self.used += blocks
        return True

    def release(
        self, program: str, held_blocks: int, chain_blocks: int, verdict: Verdict = Verdict.FREE
    ) -> None:
        """A call gives back its ``held_blocks``; its first ``chain_blocks`` stay reusable as
        the policy's ``verdict`` says: ``FREE`` (LRU queue), ``PIN`` (kept until ``unpin``),
        ``SWAP`` (to the CPU tier, or ``FREE`` without one)."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"verdict must be a Verdict, got {verdict!r}")
        chain = chain_blocks if chain_blocks < held_blocks else held_blocks
        if self.common and (program in self.common or program in self._holds):
            self._release_common(program, held_blocks, chain, verdict)
            return
        self.used -= held_blocks
        if chain == 0:
            return
        if verdict is _SWAP and self.cpu_capacity:
            self.to_cpu(program, 0, chain)
            return
        self._chain[program] = chain
        if verdict is _PIN:
            self.used += chain
            self.pinned += chain
            self._pins[program] = chain
        else:
            self._free[program] = chain
            self.cached += chain

    def _release_common(self, program: str, held: int, chain: int, verdict: Verdict) -> None:
        """``release`` of a program with a common prefix: its first ``common`` chain blocks
        stay with the common chain (extended by those the call computed past its end), its
        own blocks past them go as ``verdict`` says; a pin holds the common part too."""
        p = self.common.get(program, 0)
        self.used -= held - self._holds.get(program, 0)  # (its hold is counted once)
        shared = p if p < chain else chain
        grown = shared - self.common_blocks
        if grown > 0:  # computed past the common chain's end: it grows
            self.common_blocks = shared
            self.cached += grown
            self._free[COMMON] = self._free.get(COMMON, 0) + grown
        own = chain - shared
        if verdict is _SWAP and self.cpu_capacity:
            if own:
                self.to_cpu(program, shared, chain)
        elif verdict is _PIN:
            self._pins[program] = own
            self.used += own
            self.pinned += own
            self._rehold(program, shared)
            if own:
                self._chain[program] = chain
            return
        elif own:
            self._free[program] = own
            self.cached += own
            self._chain[program] = chain
        # (the common part after its own blocks, which are evicted first: vLLM frees a
        # request's blocks tail first)
        if grown > 0:
            self._free.move_to_end(COMMON)
        self._rehold(program, 0)

    def drop(self, program: str, held_blocks: int) -> None:
        """The program's last call gives back its ``held_blocks``; nothing of the program
        stays reusable (its CPU-tier run, if any, is forgotten)."""
        self.used -= held_blocks
        if self.loading:
            self.loading.pop(program, None)
        run = self._cpu.pop(program, None)
        if run is not None:
            self.cpu_used -= run[1] - run[0]

    def prefetch(self, program: str) -> int:
        """Brings the program's CPU-tier run back to the GPU ahead of its call (a policy's
        ``prefetch``): the run must continue its GPU chain and fit in ``available()`` (free
        chains are evicted for it, in the eviction order); the whole chain, GPU part
        included, is then pinned until the policy unpins it or its call takes it.  Returns
        the blocks copied (0, changing nothing, when there is no such run or it does not
        fit).  The engine times the copy (``loading``)."""
        run = self._cpu.get(program)
        chain = self.chain_blocks(program)
        if run is None or run[0] != chain:
            return 0
        blocks = run[1] - run[0]
        # (its common part, when no one holds it, is cached: held from now on, it is no room)
        shared = min(self.common.get(program, 0), chain) if self.common else 0
        unheld = shared - self.common_held if shared > self.common_held else 0
        if blocks > self.capacity - self.used - (self._free.get(program, 0)) - unheld:
            return 0  # (its own free chain is not room: it is pinned with the rest)
        del self._cpu[program]
        if shared:
            self._rehold(program, shared)
        self.cpu_used -= blocks
        own_free = self._free.pop(program, 0)
        self.cached -= own_free
        own_pin = self._pins.pop(program, 0)
        self.pinned -= own_pin
        # the GPU part is held from now on (own_pin was already), so the eviction spares it
        self.used += own_free
        self._evict(blocks)
        total = chain + blocks
        self.used += blocks
        self._chain[program] = total
        self._pins[program] = total - shared
        self.pinned += total - shared
        self.prefetched_blocks += blocks
        return blocks

    def keep(self, program: str) -> int:
        """Pins the program's free chain where it is, on the GPU (a prefetch that finds
        nothing to copy: ``Policy.prefetch_keeps_cached``); the blocks pinned (0: no free
        chain, nothing changed)."""
        blocks = self._free.pop(program, 0)
        if blocks:
            self.cached -= blocks
            self.used += blocks
            self.pinned += blocks
            self._pins[program] = blocks
        return blocks

    def unpin(self, program: str) -> None:
        """A pin ended: its chain joins the LRU free queue (still reusable until evicted)."""
        blocks = self._pins.pop(program, None)
        if blocks is None:
            return
        self.pinned -= blocks
        self.used -= blocks
        if blocks:  # (a pin of the common prefix alone has none of its own)
            self._free[program] = blocks
            self.cached += blocks
        if self._holds:
            self._rehold(program, 0)

    def check(self) -> None:
        """The books balance and nothing exceeds a capacity (for tests)."""
        assert 0 <= self.pinned <= self.used, (self.pinned, self.used)
        assert self.cached == sum(self._free.values()), "cached blocks out of sync"
        assert self.pinned == sum(self._pins.values()), "pinned blocks out of sync"
        assert self.free_blocks >= 0 and self.used + self.cached <= self.capacity
        assert 0 <= self.cpu_used <= max(self.cpu_capacity, 0)
        assert self.cpu_used == sum(e - s for s, e in self._cpu.values())
        assert 0 <= self.common_held <= self.common_blocks
        assert self._free.get(COMMON, 0) == self.common_blocks - self.common_held
        assert self.common_held == max(self._holds.values(), default=0), "common hold"
        assert self._depths == dict(Counter(self._holds.values())), "common depths"
