"""The contracts inside the simulator: what a policy implements (``Policy``), what it may read
of the engine (``EngineView``), what it answers for a finished call (``Verdict``), and the
shape of a run of identical engine steps (``StepPlan``).

The engine owns time, memory and the batch; a policy owns the waiting queue (what runs next)
and the fate of a finished call's KV chain.  Both sides import this module, never each other.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .call import Call

if TYPE_CHECKING:
    from .hardware import Hardware, RunTimes


@dataclass(frozen=True, slots=True)
class EngineConfig:
    block_tokens: int = 64
    token_budget: int = 8192  # tokens per step (vLLM max_num_batched_tokens)
    max_seqs: int = 256  # running calls (vLLM max_num_seqs)


class Verdict(enum.Enum):
    """What happens to a finished call's reusable blocks."""

    FREE = "free"  # to the LRU free queue: reusable until evicted (vLLM's prefix cache)
    PIN = "pin"  # kept; the policy reports when the pin ends (``expire`` / ``reclaim``)
    SWAP = "swap"  # moved to the CPU tier (freed as ``FREE`` on an engine without one)


class EngineView(Protocol):
    """What a policy may read from the engine: clock, hardware, configuration, the batch."""

    @property
    def now(self) -> float: ...

    @property
    def hardware(self) -> Hardware: ...

    @property
    def config(self) -> EngineConfig: ...

    def running_blocks(self) -> int:
        """KV blocks held by the running batch."""
        ...

    def prefill_s(self, tokens: int) -> float:
        """Time to prefill ``tokens`` on this engine (recomputing a lost prefix)."""
        ...

    def free_blocks_for(self, program: str | None) -> int:
        """Blocks a call of ``program`` could be given now: free ones, free cached ones it
        may evict, and the pinned chain of its own the engine holds for it (None: no own)."""
        ...

    @property
    def running_count(self) -> int:
        """Calls in the running batch."""
        ...

    @property
    def cpu_tier(self) -> bool:
        """The engine keeps evicted blocks reloadable in a CPU tier."""
        ...

    @property
    def unused_blocks(self) -> int:
        """Blocks neither allocated nor holding a cached chain (taking them evicts nothing)."""
        ...

    def cached_chains(self) -> dict[str, int]:
        """The free (evictable) cached chains: program → GPU blocks."""
        ...


#: ``release(program_id)``: the engine releases the program's pinned chain (``give_way``).
Unpin = Callable[[str], None]
#: ``load(program_id)``: the engine copies the program's CPU-tier chain back to the GPU and
#: pins it (``prefetch``); the blocks copied.
Load = Callable[[str], int]


@runtime_checkable
class Policy(Protocol):
    """A simulated scheduling and KV-retention policy; the engine calls these, in this order
    over a call's life: ``arrive`` → (``peek``/``pop`` → ``admitted`` → [``requeue`` when
    preempted]) → ``finished``; ``expire``/``reclaim`` release pins; ``program_done`` at the
    end of a program.  ``bind`` comes once, before the run.  The optional hooks and flags
    below the events have no-op defaults in ``PolicyHooks``, which every policy inherits."""

    name: str
    uses_cpu_tier: bool  # the engine gets a CPU tier (sized by ``Hardware``)
    #: a pin consumed by its program's arriving call (``arrive`` True) keeps its chain held
    #: until that call is admitted, as TTLScheduler holds a handed-over pin's blocks (and
    #: ``give_way`` may release it); False: the chain is free from the arrival on
    holds_handed_pins: bool
    #: pins give way before each step (``give_way``), as TTLScheduler releases them, not when
    #: the head of the queue does not fit at admission (``reclaim``)
    reclaims_ahead: bool
    #: a bound, not an engine policy: ``sim.run.simulate`` runs every program on an engine of
    #: its own under a fresh copy (``policies.alone``)
    runs_alone: bool
    #: the engine asks ``prefetch`` whenever ``next_deadline`` falls due
    prefetches: bool
    #: a prefetch (``load``) of a chain with nothing in the CPU tier to copy pins its free
    #: GPU chain where it is and answers those blocks (False: it answers 0, pinning nothing)
    prefetch_keeps_cached: bool

    def bind(self, view: EngineView) -> None: ...

    # -- the waiting queue ----------------------------------------------------------------
    def arrive(self, call: Call, now: float) -> bool:
        """A call is issued; True when its program's pin was consumed (its chain is kept)."""
        ...

    def requeue(self, call: Call, now: float) -> None:
        """A running call was preempted: back to the queue."""
        ...

    def peek(self) -> Call | None:
        """The call to admit next, or None (always None when ``waiting()`` is 0)."""
        ...

    def pop(self) -> Call:
        """Removes and returns the call ``peek`` just returned (the engine checks)."""
        ...

    def waiting(self) -> int: ...

    # -- events ---------------------------------------------------------------------------
    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        """A call entered the batch (``cache_dropped``: it had reusable blocks and lost some)."""
        ...

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        """A call ended; what becomes of its first ``chain_blocks`` (ignored on the last turn:
        the program's blocks go to the free queue, as vLLM frees them)."""
        ...

    def expire(self, now: float) -> list[str]:
        """Programs whose pins end at or before ``now``."""
        ...

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        """Programs whose pins to give up so that ``blocks_needed`` more can be allocated;
        ``for_program``: the program whose new waiting call needs them (None: running or
        preempted calls need them)."""
        ...

    def next_deadline(self) -> float | None:
        """The earliest instant the policy must be looked at again with no event before it —
        a pin deadline, or when a head refused admission may be admitted — if any (the
        engine stops a run of steps there, calls ``expire`` once it is due, and admits)."""
        ...

    def program_done(self, program_id: str, turns: int) -> None: ...

    # -- optional hooks (``PolicyHooks``: no-op defaults) ---------------------------------
    def give_way(self, step_blocks: int, now: float, unpin: Unpin) -> None:
        """With ``reclaims_ahead``, before each step while pins are held and a call waits:
        release pins (and held chains) through ``unpin`` so that the running calls' next step
        (``step_blocks``) and the head of the queue fit."""
        ...

    def stepped(self, chunks: list[tuple[Call, int]], step_s: float) -> None:
        """A step ran these prefill chunks in ``step_s`` (a run of identical steps reports its
        first: the rest continue its chunks)."""
        ...

    def eviction_order(self) -> Callable[[list[str]], list[str]] | None:
        """The order in which free cached chains are evicted (programs, first to go first),
        or None for LRU; asked once, at the engine's start."""
        ...

    def eviction_order_change_s(
        self, programs: list[str], from_s: float, until_s: float
    ) -> float | None:
        """With ``eviction_order``: the first instant in ``(from_s, until_s]`` at which that
        order of ``programs`` changes, else ``inf``; None: not known (it may change at any
        instant: a run of steps ends before a step that evicts)."""
        ...

    def prefetch(self, now: float, load: Load) -> None:
        """With ``prefetches``, when ``next_deadline`` is due: copy programs' CPU-tier chains
        back to the GPU ahead of their next call through ``load`` (``KVCache.prefetch``; it
        answers the blocks copied, 0 when nothing was).  A copied chain is pinned — the
        policy's pin, released as its others — and a call admitted before the copy ends
        waits for it.  A prefetch done must leave ``next_deadline``."""
        ...

    def program_left(self, program_id: str) -> bool:
        """A cluster's router placed the program's next call on another instance (none of
        its calls is live here): forget what expects it back (``cluster.py``).  True: its
        pin was released (the engine unpins its blocks)."""
        ...


class PolicyHooks:
    """The optional hooks and flags of ``Policy``, doing nothing: a policy inherits this and
    overrides what it uses (the engine skips a ``stepped`` left as it is)."""

    uses_cpu_tier = False
    holds_handed_pins = False
    reclaims_ahead = False
    runs_alone = False
    prefetches = False
    prefetch_keeps_cached = False

    def give_way(self, step_blocks: int, now: float, unpin: Unpin) -> None:
        return None

    def stepped(self, chunks: list[tuple[Call, int]], step_s: float) -> None:
        return None

    def eviction_order(self) -> Callable[[list[str]], list[str]] | None:
        return None

    def eviction_order_change_s(
        self, programs: list[str], from_s: float, until_s: float
    ) -> float | None:
        return None

    def prefetch(self, now: float, load: Load) -> None:
        return None

    def program_left(self, program_id: str) -> bool:
        return False


#: A run of identical engine steps: the running calls that decode, the prefill chunks (call,
#: tokens per step), the number of steps, and their step times (``hardware.StepRun`` or its
#: native twin, built from the step's shape: new tokens, attention units and KV tokens touched
#: in the first step, and how much the last two grow per step) — for a single step, its
#: seconds instead (a third of the steps: the float ``StepRun.s(1)`` would give, without
#: building the run).  A plain tuple: the engine makes one per step.
StepPlan = tuple[list[Call], list[tuple[Call, int]], int, "RunTimes | float"]
