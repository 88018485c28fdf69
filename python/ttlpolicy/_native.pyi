"""Type stub of ``ttlpolicy._native``, the Rust core behind ``ttlpolicy``.

Every class here has a pure-Python twin in ``ttlpolicy.reference`` with the same name,
signature, defaults, results and exceptions: ``TypeError`` for a wrong type, ``ValueError``
for a bad value (NaN, infinite, negative, out of range — an int too large included),
``KeyError`` for an unknown id.  When several arguments are bad, the error is the one the
reference raises: the first bad argument in the order the reference checks them.

Result types (``PinDecision``, ``Pin``, ``Ended``, ``Finished``, ``GroupStats``) compare,
hash, print and pickle by value, like the reference's frozen dataclasses.  Each object may be
shared by threads: every call is atomic (it runs under the GIL without releasing it), and an
argument whose conversion calls back into the same object works.

Checked against the module by ``python -m mypy.stubtest ttlpolicy._native``
(``scripts/check.sh``), and against the reference's names, parameters and defaults by
``tests/core/test_stub.py``.  Defaults show as ``...``: they are the core's constants, which the
bindings do not restate; the reference's signatures (``ttlpolicy.reference``) show their
values, and the parity test holds the two alike.  Sections are per topic; append below.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import SupportsFloat, SupportsIndex, Unpack, final

from ttlpolicy.config import PolicyConfig
from ttlpolicy.reference.scheduler import TurnEnd, TurnEndFields

__all__ = [
    "POLICY_CONFIG_DEFAULTS",
    "POLICY_CONFIG_PUBLISHED",
    "SOURCES",
    "SOURCE_DIGEST",
    "AdmissionControl",
    "CacheMissModel",
    "Ended",
    "EtaEstimator",
    "Finished",
    "GroupStats",
    "Link",
    "OutOfOrderCost",
    "Pin",
    "PinDecision",
    "PrefixTree",
    "ProgramLifecycle",
    "ProgramLinker",
    "ProgramRouter",
    "ProgramScheduler",
    "StepModel",
    "StepRun",
    "TTLPolicy",
    "ToolHistory",
    "__version__",
    "set_config_class",
    "solve_ttl",
]

# ---------------------------------------------------------------------------------------------
# The core's name tables, and the hook the package calls when it loads this module
# ---------------------------------------------------------------------------------------------

SOURCES: list[str]
"""``PinDecision.source`` values, in the core's order."""
POLICY_CONFIG_DEFAULTS: dict[str, object]
"""The core's default ``PolicyConfig``, field by field in the order the native ``TTLPolicy``
reads them (as ``PolicyConfig().model_dump()`` writes the Python one)."""
POLICY_CONFIG_PUBLISHED: dict[str, object]
"""The core's ``PolicyConfig.published()``, likewise."""
__version__: str
"""The crate's version."""
SOURCE_DIGEST: str
"""SHA-256 of the sources the module was built from (``bindings/build.rs``; ``"unknown"``
outside a checkout's layout), checked at import by ``_backend.py``."""

def set_config_class(cls: type[PolicyConfig]) -> None:
    """Called once by ``ttlpolicy`` on import: the class ``TTLPolicy`` checks configs against
    and builds its default config from (this module imports nothing from the package when it
    loads; ``finish`` imports ``TurnEnd`` when first given one)."""

# ---------------------------------------------------------------------------------------------
# Decision core: solver, tool history, estimators, policy
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
    """Sliding windows of tool durations, per (tenant, tool) and global; at most
    ``max_tools`` tools, shared fairly among tenants (a new one replaces the table's least
    recently observed, or its tenant's own when that tenant holds more tools than the other's).
    Tool names are cut to 128 code points; lone surrogates become U+FFFD."""

    def __new__(
        cls, window: SupportsIndex = ..., max_tools: SupportsIndex = ...
    ) -> ToolHistory: ...
    @property
    def window(self) -> int: ...
    @property
    def max_tools(self) -> int: ...
    def observe(self, tool: str | None, duration_s: SupportsFloat, tenant: str = "") -> None: ...
    def count(self, tool: str | None, tenant: str = "") -> int: ...
    def total_count(self) -> int: ...
    def num_tools(self) -> int: ...
    def tools(self, tenant: str = "") -> list[str]:
        """``tenant``'s tracked tools, least recently observed first."""
    def cdf(self, tool: str | None, t_s: SupportsFloat, tenant: str = "") -> float: ...
    def quantile(self, tool: str | None, q: SupportsFloat, tenant: str = "") -> float | None: ...
    def mean(self, tool: str | None, tenant: str = "") -> float | None: ...
    def samples(self, tool: str | None, tenant: str = "") -> list[float]:
        """The window's samples, sorted ascending."""

@final
class EtaEstimator:
    """η = −corr(k, N−k) over the last ``window`` finished programs, clamped to [0, 1];
    1.0 until ``min_programs`` are seen."""

    def __new__(
        cls, window: SupportsIndex = ..., min_programs: SupportsIndex = ..., clip: bool = ...
    ) -> EtaEstimator: ...
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

    def __new__(cls, window: SupportsIndex = ...) -> OutOfOrderCost: ...
    def observe(self, delay_s: SupportsFloat) -> None: ...
    @property
    def mean_s(self) -> float: ...
    def count(self) -> int: ...
    @property
    def window(self) -> int: ...

@final
class CacheMissModel:
    """Seconds to rebuild a dropped prefix: a fitted prefill quadratic in tokens (its fixed
    term once per ``prefill_chunk_tokens`` chunk), or the reload time from an offload tier,
    whichever is smaller."""

    def __new__(
        cls,
        prefill_base_s: SupportsFloat = ...,
        prefill_s_per_token: SupportsFloat = ...,
        prefill_s_per_token2: SupportsFloat = ...,
        kv_bytes_per_token: SupportsIndex = ...,
        offload_bandwidth_bytes_per_s: SupportsFloat | None = None,
        window: SupportsIndex = ...,
        min_samples: SupportsIndex = ...,
        prefill_chunk_tokens: SupportsIndex | None = None,
    ) -> CacheMissModel: ...
    def observe_prefill(
        self, tokens: SupportsIndex, seconds: SupportsFloat, cached_tokens: SupportsIndex = ...
    ) -> None: ...
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
    @property
    def prefill_chunk_tokens(self) -> int | None: ...
    def prefill_s(self, tokens: SupportsIndex) -> float: ...
    def reload_s(self, tokens: SupportsIndex) -> float | None: ...
    def miss_cost_s(
        self, prefix_tokens: SupportsIndex, offloaded_tokens: SupportsIndex = ...
    ) -> float: ...

@final
class PinDecision:
    """A pin decision, immutable, compared and hashed by value.  ``ttl_s == 0``: do not pin.
    ``source`` is one of "tool_cdf", "global_cdf", "exponential_prior", "capped",
    "no_benefit" (the constructor refuses any other with ValueError)."""

    __match_args__ = ("ttl_s", "benefit_s", "cost_per_s", "p_return", "source")

    def __new__(
        cls,
        ttl_s: SupportsFloat,
        benefit_s: SupportsFloat,
        cost_per_s: SupportsFloat,
        p_return: SupportsFloat,
        source: str,
    ) -> PinDecision: ...
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
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class TTLPolicy:
    """Owns the tool history and the η, T and cache-miss estimators; decides pins.  Built from
    a ``PolicyConfig`` (defaults when None); ``config`` returns that same object."""

    def __new__(cls, config: PolicyConfig | None = None) -> TTLPolicy: ...
    @property
    def config(self) -> PolicyConfig: ...
    def observe_tool(
        self, tool: str | None, duration_s: SupportsFloat, tenant: str = ""
    ) -> None: ...
    def observe_program(self, total_turns: SupportsIndex) -> None: ...
    def observe_queueing_delay(self, delay_s: SupportsFloat) -> None: ...
    def observe_prefill(
        self, tokens: SupportsIndex, seconds: SupportsFloat, cached_tokens: SupportsIndex = ...
    ) -> None: ...
    @property
    def eta(self) -> float: ...
    @property
    def out_of_order_cost_s(self) -> float: ...
    def tool_count(self, tool: str | None, tenant: str = "") -> int: ...
    def miss_cost_s(
        self, prefix_tokens: SupportsIndex, offloaded_tokens: SupportsIndex = ...
    ) -> float: ...
    def decide(
        self,
        tool: str | None = None,
        request_blocks: SupportsIndex = ...,
        mean_active_blocks: SupportsFloat = ...,
        cache_miss_cost_s: SupportsFloat | None = None,
        prefix_tokens: SupportsIndex = ...,
        now: SupportsFloat = ...,
        offloaded_tokens: SupportsIndex = ...,
        tenant: str = "",
    ) -> PinDecision:
        """How long to pin the ``request_blocks`` of a request that just called ``tool``:
        benefit = miss cost + η·T, cost_per_s = request_blocks / mean_active_blocks."""

# ---------------------------------------------------------------------------------------------
# Scheduling state: ProgramScheduler and its results; twin of
# ttlpolicy.reference.scheduler (rules in its module doc). Ids are str: non-empty, valid
# Unicode, at most 1024 bytes of UTF-8. `now` never goes backwards (ValueError).
# ---------------------------------------------------------------------------------------------

@final
class Pin:
    """``blocks`` KV blocks of ``program_id`` kept in memory until ``deadline_s``."""

    __match_args__ = ("program_id", "blocks", "deadline_s")
    def __new__(cls, program_id: str, blocks: int, deadline_s: float) -> Pin: ...
    @property
    def program_id(self) -> str: ...
    @property
    def blocks(self) -> int: ...
    @property
    def deadline_s(self) -> float: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Ended:
    """A program that ended: finished ``turns``, the ``pin`` released, the live requests
    dropped with it (``request_ids``, sorted)."""

    __match_args__ = ("program_id", "turns", "pin", "request_ids")
    def __new__(
        cls, program_id: str, turns: int, pin: Pin | None, request_ids: Sequence[str]
    ) -> Ended: ...
    @property
    def program_id(self) -> str: ...
    @property
    def turns(self) -> int: ...
    @property
    def pin(self) -> Pin | None: ...
    @property
    def request_ids(self) -> tuple[str, ...]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Finished:
    """What ``finish`` did: the policy's ``decision`` (None on a last turn), the program's
    ``pin`` if this request was pinned, ``ended`` on a last turn, the pins of other tenants
    ``released`` to make room for it within its share."""

    __match_args__ = ("decision", "pin", "ended", "released")
    def __new__(
        cls,
        decision: PinDecision | None,
        pin: Pin | None,
        ended: Ended | None,
        released: Sequence[Pin] = ...,
    ) -> Finished: ...
    @property
    def decision(self) -> PinDecision | None: ...
    @property
    def pin(self) -> Pin | None: ...
    @property
    def ended(self) -> Ended | None: ...
    @property
    def released(self) -> tuple[Pin, ...]: ...
    @property
    def pinned(self) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class ProgramScheduler:
    """Waiting queue (priority tuple ``(not preempted, not pinned, rank, program order,
    request arrival, request id)``, smallest first; rank: the program's arrival, or with
    ``serve_order="attained"`` a returning call's arrival + its program's attained seconds;
    program order: the order in which programs were first seen) and pin table of CacheTTL
    over the given ``TTLPolicy`` (used, not copied; any other object is refused with
    TypeError).  At most
    ``max_idle_programs`` idle programs (no live request, no pin) are kept, the one idle
    longest forgotten first, shared fairly among tenants (counted in
    ``dropped_idle_programs``).  ``tenant_weights``: the
    tenants' weights in their shares of the pin budget, by tenant key (``ids.tenant_key``;
    default: equal)."""
    def __new__(
        cls,
        policy: TTLPolicy,
        total_blocks: SupportsIndex,
        pin_budget_blocks: SupportsIndex,
        max_idle_programs: SupportsIndex = ...,
        tenant_weights: dict[str, SupportsIndex] | None = None,
    ) -> ProgramScheduler: ...
    @property
    def policy(self) -> TTLPolicy: ...
    @property
    def pin_handover(self) -> str:
        """``policy.config.pin_handover`` at construction: ``"arrival"`` or ``"schedule"``."""
    @property
    def serve_order(self) -> str:
        """``policy.config.serve_order`` at construction: ``"program"`` or ``"attained"``."""
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
    def first_waiting(self, n: SupportsIndex) -> list[str]: ...
    def pop_many(self, n: SupportsIndex, now: SupportsFloat) -> list[str]: ...
    def take(self, request_id: str, now: SupportsFloat) -> None: ...
    def preempt(self, request_id: str, now: SupportsFloat) -> None: ...
    def finish(
        self,
        request_id: str,
        now: SupportsFloat,
        blocks_held: SupportsIndex,
        turn: TurnEnd | None = None,
        **fields: Unpack[TurnEndFields],
    ) -> Finished:
        """Ask the policy (unless ``turn`` is the last) and pin ``blocks_held`` until
        ``now + ttl_s`` when ``ttl_s > 0`` and the pin budget has room; a last turn ends the
        program.  ``turn``: a ``TurnEnd``, or its fields as keywords."""
    def expire(self, now: SupportsFloat) -> list[Pin]:
        """Pins with ``deadline_s <= now``, removed, by (deadline, program id); with
        ``pin_handover == "schedule"``: ``deadline_s < now`` and no request of theirs waiting."""
    def reclaim(
        self, blocks_needed: SupportsIndex, now: SupportsFloat, for_program: str | None = None
    ) -> list[Pin]:
        """Pins removed latest-arrived program first until ``blocks_needed`` are released;
        with ``for_program``, only pins of programs that arrived after it."""
    def record_queueing_delay(self, delay_s: SupportsFloat) -> None: ...
    def end_program(self, program_id: str) -> Ended: ...
    def abort(self, request_id: str) -> Ended:
        """Ends the request's whole program, without observing η."""
    @property
    def total_blocks(self) -> int: ...
    @property
    def max_idle_programs(self) -> int: ...
    @property
    def dropped_idle_programs(self) -> int: ...
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
    def priority(self, request_id: str) -> tuple[bool, bool, float, int, float, str]: ...

# ---------------------------------------------------------------------------------------------
# Prefix tree: block-hash prefix tree, per-group TTLs
# ---------------------------------------------------------------------------------------------

@final
class GroupStats:
    """A snapshot of one group of blocks (see ``ttlpolicy.reference.prefix_tree``)."""

    __match_args__ = ("key", "blocks", "accesses", "hits", "reuse_s", "ttl_s", "last_access_s")

    def __new__(
        cls,
        key: Sequence[int],
        blocks: int,
        accesses: int,
        hits: int,
        reuse_s: Sequence[float],
        ttl_s: float,
        last_access_s: float | None,
    ) -> GroupStats: ...
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
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class PrefixTree:
    """Blocks held in one tier, as a tree of block-hash prefixes, grouped for per-group TTLs."""

    def __new__(
        cls,
        max_nodes: SupportsIndex = ...,
        group_depth: SupportsIndex = ...,
        window: SupportsIndex = ...,
        max_idle_groups: SupportsIndex = ...,
        default_ttl_s: SupportsFloat = ...,
    ) -> PrefixTree: ...
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

# ---------------------------------------------------------------------------------------------
# Program-level load control (issue 10): AdmissionControl; twin of
# ttlpolicy.reference.admission (rules and the no-starvation invariant in its module doc).
# ---------------------------------------------------------------------------------------------

@final
class AdmissionControl:
    def __new__(
        cls,
        policy: TTLPolicy,
        total_blocks: SupportsIndex,
        max_idle_programs: SupportsIndex = ...,
        tenant_weights: dict[str, SupportsIndex] | None = None,
    ) -> AdmissionControl: ...
    @property
    def policy(self) -> TTLPolicy: ...
    @property
    def total_blocks(self) -> int: ...
    @property
    def max_idle_programs(self) -> int: ...
    @property
    def dropped_idle_programs(self) -> int: ...
    def arrive(self, program_id: str, now: SupportsFloat, blocks_needed: SupportsIndex) -> None: ...
    def finish(
        self,
        program_id: str,
        now: SupportsFloat,
        blocks_held: SupportsIndex,
        tool: str | None = None,
        rebuild_s: SupportsFloat = ...,
        last_turn: bool = ...,
    ) -> None: ...
    def end(self, program_id: str) -> None: ...
    def next_use_s(self, program_id: str, now: SupportsFloat) -> float: ...
    def working_set_blocks(self, now: SupportsFloat) -> int: ...
    def next_shrink_s(self, now: SupportsFloat) -> float:
        """The first instant after ``now`` at which the working set may shrink with no event;
        a program refused admission at ``now`` stays refused until then (``inf``: never)."""
    def may_run(self, program_id: str, now: SupportsFloat) -> bool:
        """True for an admitted program; admits the oldest waiting one when its footprint
        fits beside the working set (or nobody is admitted), or its wait is bounded (the
        reference's module doc)."""
    def admit(self, program_id: str, now: SupportsFloat) -> None:
        """Admit the program now, whatever the working set (requests load control must not
        hold back: an engine's anonymous ones)."""
    def eviction_order(self, program_ids: Iterable[str], now: SupportsFloat) -> list[str]: ...
    def next_order_change_s(
        self, program_ids: Iterable[str], now: SupportsFloat, until_s: SupportsFloat
    ) -> float:
        """The first instant in ``(now, until_s]`` at which ``eviction_order(program_ids, ·)``
        differs from its answer at ``now`` with no event in between (``inf``: none)."""
    def knows(self, program_id: str) -> bool: ...
    def admitted(self, program_id: str) -> bool: ...
    @property
    def admitted_count(self) -> int: ...
    @property
    def program_count(self) -> int: ...
    @property
    def waiting_count(self) -> int: ...

# ---------------------------------------------------------------------------------------------
# A program's life on one engine: ProgramLifecycle; twin of ttlpolicy.reference.lifecycle
# (rules in its module doc).
# ---------------------------------------------------------------------------------------------

@final
class ProgramLifecycle:
    """Joins a ``ProgramScheduler`` and an optional ``AdmissionControl`` of the same policy
    (the very objects given, borrowed for each call) and holds the chains handed over to
    requests until they are admitted."""

    def __new__(
        cls, scheduler: ProgramScheduler, admission: AdmissionControl | None = None
    ) -> ProgramLifecycle: ...
    @property
    def scheduler(self) -> ProgramScheduler: ...
    @property
    def admission(self) -> AdmissionControl | None: ...
    def arrive(
        self, request_id: str, program_id: str, now: SupportsFloat, blocks_needed: SupportsIndex
    ) -> Pin | None: ...
    def admitted(self, request_id: str) -> str | None: ...
    def finish(
        self,
        request_id: str,
        now: SupportsFloat,
        blocks_held: SupportsIndex,
        turn: TurnEnd | None = None,
        **fields: Unpack[TurnEndFields],
    ) -> Finished: ...
    def abort(self, request_id: str) -> Ended: ...
    def end_program(self, program_id: str) -> Ended: ...
    def may_run(self, program_id: str, now: SupportsFloat) -> bool: ...
    def expire(self, now: SupportsFloat) -> list[Pin]: ...
    def give_way(
        self,
        now: SupportsFloat,
        short_blocks: SupportsIndex,
        release: Callable[[str, str | None], int],
        stalled: bool = ...,
        keep: str | None = None,
        for_program: str | None = None,
    ) -> int:
        """``release`` is called while the parts are borrowed: it must not call back into
        this object, its scheduler or its load control (``RuntimeError``).  One that raises
        does not stop the other reclaimed pins' releases: the first error is raised after."""
    def held(self, request_id: str) -> str | None: ...
    @property
    def held_request_ids(self) -> list[str]: ...
    @property
    def held_count(self) -> int: ...
    def may_give_way(self, nothing_runs: bool) -> bool: ...

# ---------------------------------------------------------------------------------------------
# Many instances: ProgramRouter; twin of ttlpolicy.reference.router (rules in its module doc).
# ---------------------------------------------------------------------------------------------

@final
class ProgramRouter:
    """Routes programs' calls over engine instances from their reported state, pricing a
    call with the policy's miss model and queueing delay (the policy is used, never
    copied)."""

    def __new__(
        cls,
        policy: TTLPolicy,
        max_instances: SupportsIndex = ...,
        max_programs: SupportsIndex = ...,
    ) -> ProgramRouter: ...
    @property
    def policy(self) -> TTLPolicy: ...
    def add_instance(self, instance_id: str) -> None: ...
    def report(
        self,
        instance_id: str,
        free_blocks: SupportsIndex,
        total_blocks: SupportsIndex,
        queue_len: SupportsIndex,
        queued_tokens: SupportsIndex,
        working_set_blocks: SupportsIndex,
        cached_fraction: SupportsFloat,
        return_queue_len: SupportsIndex | None = None,
        return_queued_tokens: SupportsIndex | None = None,
    ) -> bool:
        """``return_queue_len``, ``return_queued_tokens`` (given together): the part of the
        queue a returning call of a program served here waits behind; None: the whole queue."""
    def pinned(
        self,
        instance_id: str,
        program_id: str,
        deadline_s: SupportsFloat,
        blocks: SupportsIndex,
        now: SupportsFloat | None = None,
    ) -> bool:
        """False: refused (drained instance, expired by ``now`` (default: the router's
        clock), program homed at another instance, or unknown while the table is full)."""
    def remove_instance(self, instance_id: str) -> list[str]: ...
    def drain(self, instance_id: str) -> list[str]: ...
    def evicted(
        self, instance_id: str, program_id: str, held_blocks: SupportsIndex = ...
    ) -> bool: ...
    def end_program(self, program_id: str) -> bool: ...
    def route(
        self,
        program_id: str,
        now: SupportsFloat,
        blocks_needed: SupportsIndex,
        prefix_tokens: SupportsIndex,
    ) -> str: ...
    def home(self, program_id: str) -> str | None: ...
    def routable(self, instance_id: str) -> bool: ...
    @property
    def instance_ids(self) -> list[str]: ...
    @property
    def program_count(self) -> int: ...
    @property
    def max_instances(self) -> int: ...
    @property
    def max_programs(self) -> int: ...

# The simulator's step-time model; twin of ttlpolicy.sim.hardware (StepModel, StepRun), the
# same floats to the bit (tests/sim/test_step_time_native.py).
# ---------------------------------------------------------------------------------------------

@final
class StepModel:
    """Each line as (c0, c_tok, c_attn, c_kv, c_seq)."""

    def __new__(
        cls,
        compute: tuple[float, float, float, float, float],
        memory: tuple[float, float, float, float, float],
        decode: tuple[float, float, float, float, float] | None = None,
    ) -> StepModel: ...
    def step_s(self, tokens: float, attn: float, kv: float, seqs: float = 0.0) -> float: ...
    def run(
        self,
        tokens: float,
        attn0: float,
        d_attn: float,
        kv0: float,
        d_kv: float,
        seqs: float = 0.0,
    ) -> StepRun: ...

@final
class StepRun:
    @property
    def a0(self) -> float: ...
    @property
    def da(self) -> float: ...
    @property
    def b0(self) -> float: ...
    @property
    def db(self) -> float: ...
    @property
    def split(self) -> int | None: ...
    @property
    def monotone(self) -> bool: ...
    def s(self, k: int) -> float: ...
    def reach(self, start_s: float, until_s: float, k: int, s_k: float) -> tuple[int, float]:
        """``k`` must be in [1, 2**53] (``ValueError``)."""

# ---------------------------------------------------------------------------------------------
# Programs without ids: ProgramLinker; twin of ttlpolicy.reference.linker (rules in its module
# doc).
# ---------------------------------------------------------------------------------------------

@final
class Link:
    """Which program a call belongs to: ``kind`` (``"continue"``, ``"fork"``, ``"new"``),
    ``program`` (an int the linker made, or a deployment's str id), ``parent`` (forks),
    ``depth_blocks``, ``context_blocks``."""

    __match_args__ = ("kind", "program", "parent", "depth_blocks", "context_blocks")
    def __new__(
        cls,
        kind: str,
        program: int | str,
        parent: int | str | None,
        depth_blocks: int,
        context_blocks: int,
    ) -> Link: ...
    @property
    def kind(self) -> str: ...
    @property
    def program(self) -> int | str: ...
    @property
    def parent(self) -> int | str | None: ...
    @property
    def depth_blocks(self) -> int: ...
    @property
    def context_blocks(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class ProgramLinker:
    """Tells a call's program from its prompt's chained block hashes (only the probed items of
    a hash sequence are read)."""

    def __new__(
        cls,
        max_turn_ends: SupportsIndex = ...,
        max_age_s: SupportsFloat = ...,
        max_programs: SupportsIndex = ...,
        min_depth_fraction: SupportsFloat = ...,
    ) -> ProgramLinker: ...
    def link(
        self,
        tenant: str,
        prompt_hashes: Sequence[SupportsIndex | bytes],
        now: SupportsFloat,
        program: str | None = None,
    ) -> Link: ...
    def finished(
        self,
        tenant: str,
        program: int | str,
        hashes: Sequence[SupportsIndex | bytes],
        now: SupportsFloat,
        prompt_blocks: SupportsIndex | None = None,
    ) -> bool: ...
    def end_program(self, tenant: str, program: int | str) -> bool: ...
    def running(self, tenant: str, program: int | str) -> int: ...
    @property
    def turn_end_count(self) -> int: ...
    @property
    def program_count(self) -> int: ...
    @property
    def point_count(self) -> int: ...
    @property
    def max_turn_ends(self) -> int: ...
    @property
    def max_age_s(self) -> float: ...
    @property
    def max_programs(self) -> int: ...
    @property
    def min_depth_fraction(self) -> float: ...
