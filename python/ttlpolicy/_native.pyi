"""Type stub of ``ttlpolicy._native``, the Rust core behind ``ttlpolicy``.

Every class here has a pure-Python twin in ``ttlpolicy.reference`` with the same name,
signature, defaults, results and exceptions: ``TypeError`` for a wrong type, ``ValueError``
for a bad value (NaN, infinite, negative, out of range — an int too large included),
``KeyError`` for an unknown id.  When several arguments are bad, the error is the one the
reference raises: the first bad argument in the order the reference checks them.

Sections are per topic; append new ones below.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import SupportsFloat, SupportsIndex, final

from ttlpolicy.config import PolicyConfig

# ---------------------------------------------------------------------------------------------
# Decision core (issue 2): solver, tool history, estimators, policy
# ---------------------------------------------------------------------------------------------

def solve_ttl(
    samples_s: Iterable[SupportsFloat],
    benefit_s: SupportsFloat,
    cost_per_s: SupportsFloat,
    max_ttl_s: SupportsFloat,
) -> tuple[float, float]:
    """``(tau_s, value)``: argmax over τ ∈ {0} ∪ {samples ≤ max_ttl_s} of
    P(τ)·benefit_s − cost_per_s·τ; ties to the smaller τ; empty samples → (0.0, 0.0)."""

@final
class ToolHistory:
    """Sliding windows of tool durations, per tool and global; at most ``max_tools`` tools
    (least recently observed dropped).  Tool names are cut to 128 code points; lone
    surrogates become U+FFFD."""

    def __init__(self, window: SupportsIndex = 1024, max_tools: SupportsIndex = 1024) -> None: ...
    @property
    def window(self) -> int: ...
    @property
    def max_tools(self) -> int: ...
    def observe(self, tool: str | None, duration_s: SupportsFloat) -> None: ...
    def count(self, tool: str | None) -> int: ...
    def total_count(self) -> int: ...
    def num_tools(self) -> int: ...
    def tools(self) -> list[str]:
        """Tracked tools, least recently observed first."""
    def cdf(self, tool: str | None, t_s: SupportsFloat) -> float: ...
    def quantile(self, tool: str | None, q: SupportsFloat) -> float | None: ...
    def mean(self, tool: str | None) -> float | None: ...
    def samples(self, tool: str | None) -> list[float]:
        """The window's samples, sorted ascending."""

@final
class EtaEstimator:
    """η = −corr(k, N−k) over the last ``window`` finished programs, clamped to [0, 1];
    1.0 until ``min_programs`` are seen."""

    def __init__(
        self, window: SupportsIndex = 256, min_programs: SupportsIndex = 8, clip: bool = True
    ) -> None: ...
    def observe(self, total_turns: SupportsIndex) -> None: ...
    @property
    def eta(self) -> float: ...
    def count(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def min_programs(self) -> int: ...
    @property
    def clip(self) -> bool:
        """False: η = −corr unclipped, in [−1, 1] (the paper's)."""

@final
class OutOfOrderCost:
    """T: mean queueing delay of the last ``window`` requests that found their cache dropped."""

    def __init__(self, window: SupportsIndex = 256) -> None: ...
    def observe(self, delay_s: SupportsFloat) -> None: ...
    @property
    def mean_s(self) -> float: ...
    def count(self) -> int: ...
    @property
    def window(self) -> int: ...

@final
class CacheMissModel:
    """Seconds to rebuild a dropped prefix: a fitted prefill quadratic in tokens, or the reload
    time from an offload tier, whichever is smaller."""

    def __init__(
        self,
        prefill_base_s: SupportsFloat = 0.01,
        prefill_s_per_token: SupportsFloat = 1e-4,
        prefill_s_per_token2: SupportsFloat = 0.0,
        kv_bytes_per_token: SupportsIndex = 131072,
        offload_bandwidth_bytes_per_s: SupportsFloat | None = None,
        window: SupportsIndex = 256,
        min_samples: SupportsIndex = 8,
    ) -> None: ...
    def observe_prefill(self, tokens: SupportsIndex, seconds: SupportsFloat) -> None: ...
    @property
    def fitted(self) -> bool: ...
    @property
    def coefficients(self) -> tuple[float, float, float]: ...
    @property
    def default_coeffs(self) -> tuple[float, float, float]: ...
    @property
    def kv_bytes_per_token(self) -> int: ...
    @property
    def offload_bandwidth_bytes_per_s(self) -> float | None: ...
    @property
    def window(self) -> int: ...
    @property
    def min_samples(self) -> int: ...
    def prefill_s(self, tokens: SupportsIndex) -> float: ...
    def reload_s(self, tokens: SupportsIndex) -> float | None: ...
    def miss_cost_s(
        self, prefix_tokens: SupportsIndex, offloaded_tokens: SupportsIndex = 0
    ) -> float: ...

@final
class PinDecision:
    """A pin decision, immutable, compared and hashed by value.  ``ttl_s == 0``: do not pin.
    ``source`` is one of "tool_cdf", "global_cdf", "exponential_prior", "capped",
    "no_benefit" (the constructor refuses any other with ValueError)."""

    def __init__(
        self, ttl_s: float, benefit_s: float, cost_per_s: float, p_return: float, source: str
    ) -> None: ...
    @property
    def ttl_s(self) -> float: ...
    @property
    def benefit_s(self) -> float: ...
    @property
    def cost_per_s(self) -> float: ...
    @property
    def p_return(self) -> float: ...
    @property
    def source(self) -> str: ...
    @property
    def pin(self) -> bool: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

@final
class TTLPolicy:
    """Owns the tool history and the η, T and cache-miss estimators; decides pins.  Built from
    a ``PolicyConfig`` (defaults when None); ``config`` returns that same object."""

    def __init__(self, config: PolicyConfig | None = None) -> None: ...
    @property
    def config(self) -> PolicyConfig: ...
    def observe_tool(self, tool: str | None, duration_s: SupportsFloat) -> None: ...
    def observe_program(self, total_turns: SupportsIndex) -> None: ...
    def observe_queueing_delay(self, delay_s: SupportsFloat) -> None: ...
    def observe_prefill(self, tokens: SupportsIndex, seconds: SupportsFloat) -> None: ...
    @property
    def eta(self) -> float: ...
    @property
    def out_of_order_cost_s(self) -> float: ...
    def tool_count(self, tool: str | None) -> int: ...
    def miss_cost_s(
        self, prefix_tokens: SupportsIndex, offloaded_tokens: SupportsIndex = 0
    ) -> float: ...
    def decide(
        self,
        tool: str | None = None,
        request_blocks: SupportsIndex = 0,
        mean_active_blocks: SupportsFloat = 1.0,
        cache_miss_cost_s: SupportsFloat | None = None,
        prefix_tokens: SupportsIndex = 0,
        now: SupportsFloat = 0.0,
        offloaded_tokens: SupportsIndex = 0,
    ) -> PinDecision:
        """How long to pin the ``request_blocks`` of a request that just called ``tool``:
        benefit = miss cost + η·T, cost_per_s = request_blocks / mean_active_blocks."""

# --- scheduler ---
# ---------------------------------------------------------------------------------------------
# Scheduling state (issue 3): ProgramScheduler and its results; twin of
# ttlpolicy.reference.scheduler (rules in its module doc). Ids are str: non-empty, valid
# Unicode, at most 1024 bytes of UTF-8. `now` never goes backwards (ValueError).
# ---------------------------------------------------------------------------------------------

@final
class Pin:
    """``blocks`` KV blocks of ``program_id`` kept in memory until ``deadline_s``."""
    @property
    def program_id(self) -> str: ...
    @property
    def blocks(self) -> int: ...
    @property
    def deadline_s(self) -> float: ...

@final
class Ended:
    """A program that ended: finished ``turns``, the ``pin`` released, the live requests
    dropped with it (``request_ids``, sorted)."""
    @property
    def program_id(self) -> str: ...
    @property
    def turns(self) -> int: ...
    @property
    def pin(self) -> Pin | None: ...
    @property
    def request_ids(self) -> tuple[str, ...]: ...

@final
class Finished:
    """What ``finish`` did: the policy's ``decision`` (None on a last turn), the program's
    ``pin`` if this request was pinned, ``ended`` on a last turn."""
    @property
    def decision(self) -> PinDecision | None: ...
    @property
    def pin(self) -> Pin | None: ...
    @property
    def ended(self) -> Ended | None: ...
    @property
    def pinned(self) -> bool: ...

@final
class ProgramScheduler:
    """Waiting queue (priority tuple ``(not preempted, not pinned, program arrival,
    request arrival, request id)``, smallest first) and pin table of CacheTTL over the given
    ``TTLPolicy`` (used, not copied)."""
    def __init__(
        self, policy: TTLPolicy, total_blocks: SupportsIndex, pin_budget_blocks: SupportsIndex
    ) -> None: ...
    @property
    def policy(self) -> TTLPolicy: ...
    @property
    def pin_handover(self) -> str:
        """``policy.config.pin_handover`` at construction: ``"arrival"`` or ``"schedule"``."""
    def arrive(
        self, request_id: str, program_id: str, now: SupportsFloat, blocks_needed: SupportsIndex
    ) -> Pin | None:
        """Enqueue; returns the program's pin if this arrival consumed it."""
    def arrive_many(
        self,
        request_ids: Iterable[str],
        program_ids: Iterable[str],
        now: SupportsFloat,
        blocks_needed: Iterable[SupportsIndex],
    ) -> list[Pin | None]:
        """``arrive`` for each, in order, at one ``now``; all checked first."""
    def peek(self) -> str | None: ...
    def pop(self, now: SupportsFloat) -> str | None: ...
    def pop_many(self, n: SupportsIndex, now: SupportsFloat) -> list[str]: ...
    def preempt(self, request_id: str, now: SupportsFloat) -> None: ...
    def finish(
        self,
        request_id: str,
        now: SupportsFloat,
        blocks_held: SupportsIndex,
        tool: str | None = None,
        last_turn: bool = False,
        cache_miss_cost_s: SupportsFloat | None = None,
        prefix_tokens: SupportsIndex = 0,
        offloaded_tokens: SupportsIndex = 0,
        mean_active_blocks: SupportsFloat | None = None,
    ) -> Finished:
        """Ask the policy (unless last turn) and pin ``blocks_held`` until ``now + ttl_s``
        when ``ttl_s > 0`` and the pin budget has room; a last turn ends the program."""
    def expire(self, now: SupportsFloat) -> list[Pin]:
        """Pins with ``deadline_s <= now``, removed, by (deadline, program id); with
        ``pin_handover == "schedule"``: ``deadline_s < now`` and no request of theirs waiting."""
    def reclaim(self, blocks_needed: SupportsIndex, now: SupportsFloat) -> list[Pin]:
        """Pins removed latest-arrived program first until ``blocks_needed`` are released."""
    def record_queueing_delay(self, delay_s: SupportsFloat) -> None: ...
    def end_program(self, program_id: str) -> Ended: ...
    def abort(self, request_id: str) -> Ended:
        """Ends the request's whole program, without observing η."""
    @property
    def total_blocks(self) -> int: ...
    @property
    def pin_budget_blocks(self) -> int: ...
    @property
    def pinned_blocks(self) -> int: ...
    @property
    def pin_count(self) -> int: ...
    @property
    def waiting_count(self) -> int: ...
    @property
    def running_count(self) -> int: ...
    @property
    def program_count(self) -> int: ...
    @property
    def next_deadline_s(self) -> float | None: ...
    @property
    def mean_active_blocks(self) -> float | None: ...
    def pins(self) -> list[Pin]: ...
    def pin(self, program_id: str) -> Pin | None: ...
    def state(self, request_id: str) -> str:
        """``"waiting"`` or ``"running"``."""
    def priority(self, request_id: str) -> tuple[bool, bool, float, float, str]: ...

# ---------------------------------------------------------------------------------------------
# --- prefix tree --- (issue 4): block-hash prefix tree, per-group TTLs
# ---------------------------------------------------------------------------------------------

@final
class GroupStats:
    """A snapshot of one group of blocks (see ``ttlpolicy.reference.prefix_tree``)."""

    @property
    def key(self) -> tuple[int, ...]: ...
    @property
    def blocks(self) -> int: ...
    @property
    def accesses(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def reuse_s(self) -> tuple[float, ...]: ...
    @property
    def ttl_s(self) -> float: ...
    @property
    def last_access_s(self) -> float | None: ...

@final
class PrefixTree:
    """Blocks held in one tier, as a tree of block-hash prefixes, grouped for per-group TTLs."""

    def __init__(
        self,
        max_nodes: SupportsIndex = 1 << 20,
        group_depth: SupportsIndex = 2,
        window: SupportsIndex = 256,
        max_idle_groups: SupportsIndex = 1 << 16,
        default_ttl_s: SupportsFloat = ...,
    ) -> None: ...
    @property
    def max_nodes(self) -> int: ...
    @property
    def group_depth(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def max_idle_groups(self) -> int: ...
    @property
    def default_ttl_s(self) -> float: ...
    @property
    def expired_blocks(self) -> int: ...
    @property
    def evicted_blocks(self) -> int: ...
    def __len__(self) -> int: ...
    def insert(self, hash_ids: Iterable[SupportsIndex], now: SupportsFloat) -> int: ...
    def match_len(self, hash_ids: Iterable[SupportsIndex]) -> int: ...
    def expire(self, now: SupportsFloat) -> int: ...
    def groups(self) -> list[GroupStats]: ...
    def group_ttls(
        self,
        benefit_per_hit: SupportsFloat,
        price_per_block_s: SupportsFloat,
        max_ttl_s: SupportsFloat,
    ) -> dict[tuple[int, ...], float]: ...
    def set_group_ttls(self, ttls: Mapping[Sequence[SupportsIndex], SupportsFloat]) -> None: ...
    def block_seconds(self, now: SupportsFloat) -> float: ...
