"""Which program a call belongs to, told from its prompt: for clients that send no program id.

An agent's next call extends its previous call's prompt, and an engine hashes prompts into
*chained* blocks (block ``i``'s hash identifies the whole prefix up to ``i``, as vLLM's and
the agentic traces' ids do).  So a call whose prompt begins with the blocks of a turn that
ended recently continues that turn's program.  The linker keeps the recent *turn ends* of
each tenant and answers, for a call's ``prompt_hashes`` at ``now``, a :class:`Link`:

* ``"continue"`` — the call continues program ``program`` (which had no call running);
* ``"fork"`` — it continues ``parent``'s context while ``parent`` has a call running (a
  sub-agent, parallel calls from one context): a new program ``program`` forked from
  ``parent``;
* ``"new"`` — nothing unambiguous matches: a new program ``program``.

Program keys: the linker makes an ``int`` key for each program it starts (1, 2, ...: never
reused, unique across tenants); a program a deployment names itself keeps its ``str`` id
(``link(..., program=id)``).  The two never collide (an int is not a str); an engine that
needs one string id may use ``f"linked:{key}"`` and ``f"id:{name}"``.

**Recording.** ``finished(tenant, program, hashes, now, prompt_blocks)`` records a turn end:
``hashes`` are the call's blocks (its prompt's, then its output's when the engine hashed
them), ``prompt_blocks`` how many are the prompt (None: all).  Of a sequence of ``n`` blocks
the linker records the *grid* points: for each level ``j`` (``2**j <= n - 1``, and the level
where ``(n - 1) >> j`` reaches 0), the last ``RECORD_PER_LEVEL`` multiples of ``2**j`` at most
``n - 1`` — dense near the end, geometrically sparser towards the start, at most
``RECORD_PER_LEVEL * (bit_length(n - 1) + 1)`` points — of the prompt and of prompt+output,
each point's hash entered in an index keyed by ``(tenant, hash)`` that says which program
recorded it.  A point two programs recorded is *ambiguous*, for good: a prefix many programs
share (a system prompt) never links.

**Lookup** (bounded: at most ``1 + bit_length(n - 1)`` probes whatever the prompt, and only
the probed items of ``prompt_hashes`` are read).  Probe block 0; if the tenant recorded it,
descend from the top level: ``g = 0``; for ``j`` from ``bit_length(n - 1) - 1`` down to 0,
probe ``p = g + 2**j`` (if ``p <= n - 1``) and move ``g = p`` when the tenant recorded
``prompt_hashes[p]``.  Chained hashes make a hit at ``p`` mean "a recorded turn shares this
prompt's first ``p + 1`` blocks", so the descent walks the binary digits of the shared
prefix's last block ``c - 1``; a turn end that ends at ``e >= c`` recorded the last two
multiples of ``2**j`` below ``e`` at each level, so the descent finds ``g = c - 1`` when
``e == c`` (the prompt extends the whole turn) and a point at most about ``2 (e - c)`` short of
it when the turn's last blocks differ (a chat template that re-renders them).  The point found
decides: unrecorded block 0, an ambiguous point, or a point whose program ``P`` was forgotten
→ ``new``; so is a match shorter than ``min_depth_fraction`` of ``P``'s latest prompt (an
agent's next call keeps all of its previous prompt, or all but its last blocks when a chat
template re-renders them: 98.2 % of the agentic sessions' calls keep ≥ 90 % of it; a shorter
match is another program sharing a prefix, or a rewritten history).  Else ``fork`` when ``P``
has a call running, else ``continue`` (``P`` is then running).
``depth_blocks`` = ``g + 1`` (the prompt's blocks found in the linked program's context, 0 for
a new program) and ``context_blocks`` = the blocks of the linked program's latest turn end
(prompt + output; for a fork, the parent's): ``depth_blocks < context_blocks`` says that the
program's context beyond ``depth_blocks`` no longer serves it (its history was rewritten).
A compaction (a prompt that keeps little of the program, or only what many programs share)
is ``new``: it cannot be told from a new program.  The old program gets no further call, so
the caller learns nothing at once: its pin lapses at its TTL, its turn ends age out
(``max_age_s``), and load control stops expecting it back once it has been away longer than
most of its tool's gaps (``admission``: ``inferred_away_quantile``).  (A call that names
its program supersedes the pin at once, ``ttlpolicy.pin_claims``.  Releasing on an
unambiguous short match instead was measured and rejected: a block every session shares is
often recorded by one program only, docs/investigations/supersede.md.)  Identical first
turns: a prompt that only one program recorded links to it (it cannot be told from that
program's retry); once two programs recorded a prefix, it never links again.

**Explicit ids** take precedence (the caller decides): ``link(tenant, hashes, now,
program=name)`` does not search; it marks ``name`` running (``continue`` when known, else
``new``), with ``depth_blocks`` as found for it.  ``finished`` records its turn ends like any
other, so a call without an id that continues a named program's turn links to it.

**Running calls.** ``link`` counts a call running in its program until ``finished`` (or
``finished`` with no hashes, for an aborted call: nothing recorded).  ``end_program`` forgets a
program; a call matching its turn ends is ``new``.

**Bounded state.** At most ``max_turn_ends`` turn ends, none older than ``max_age_s`` (dropped
at the next call whose ``now`` is later than its time plus ``max_age_s``), each with at most
``2 * RECORD_PER_LEVEL * 41`` index points; at most ``max_programs`` programs; a program with
no turn end and no running call is forgotten.  Tenants: every key holds the tenant, so a copy
of another tenant's prompt matches nothing of that tenant, and a prompt crafted to match many
turns costs one lookup's probes.  **The bounds are shared fairly**: when a new program (turn
end) of tenant ``T`` finds its table full, what goes is the least recently used program
(oldest turn end) of the whole table — unless ``T`` holds more than that one's tenant does,
when it is ``T``'s own least recent program (oldest turn end).  So a tenant flooding new
programs pushes out only those of tenants holding at least as many as it, and once it holds
the most it churns its own: the others keep linking.  (Many tenants flooding at once still share the
table with everyone.  "More", not "as many": a fork's parent, just used, would otherwise be
what its fork pushes out when its tenant holds that one program.)  Hashes:
ints in ``[-2**63, 2**64)``, read modulo ``2**64`` (signed and unsigned 64-bit ids both
work), or ``bytes``, read as the little-endian int of their first 8 bytes (vLLM's block
hashes, passed as they are: no Python-level conversion per probe).  Time: ``now`` never goes
back.
Errors before any change: ``TypeError`` (wrong types), ``ValueError`` (bad values),
``KeyError`` never (an unknown program is answered False).
"""

from __future__ import annotations

import operator
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._validate import check_id, finite, i64_field, int_in, short_repr, unchecked
from ._sync import synchronized

__all__ = [
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_MAX_PROGRAMS",
    "DEFAULT_MAX_TURN_ENDS",
    "DEFAULT_MIN_DEPTH_FRACTION",
    "RECORD_PER_LEVEL",
    "Link",
    "ProgramLinker",
    "grid_positions",
    "probe_limit",
]

DEFAULT_MAX_TURN_ENDS = 1 << 18
DEFAULT_MAX_PROGRAMS = 1 << 18
DEFAULT_MAX_AGE_S = 86400.0
DEFAULT_MIN_DEPTH_FRACTION = 0.9
#: The largest bounds one may ask for.
MAX_TURN_ENDS = 1 << 30
MAX_PROGRAMS = 1 << 30
#: A prompt (or prompt + output) has at most this many blocks (the core's MAX_BLOCKS).
MAX_PROMPT_BLOCKS = 1 << 40
#: Grid points recorded per level (see the module doc).
RECORD_PER_LEVEL = 2
HASH_MIN, HASH_LIMIT = -(1 << 63), 1 << 64
_MASK = (1 << 64) - 1
#: The largest program key the linker makes or accepts.
MAX_PROGRAM_KEY = (1 << 63) - 1

ProgramKey = int | str
LINK_KINDS = ("continue", "fork", "new")


@dataclass(frozen=True, slots=True)
class Link:
    """Which program a call belongs to (see the module doc): ``kind`` is ``"continue"``,
    ``"fork"`` or ``"new"``; ``parent`` the forked program (None unless a fork)."""

    kind: str
    program: int | str
    parent: int | str | None
    depth_blocks: int
    context_blocks: int

    def __post_init__(self) -> None:
        # a caller's values checked as the native class converts them (its maker's: unchecked)
        if not (isinstance(self.kind, str) and self.kind in LINK_KINDS):
            raise ValueError(
                f"kind must be 'continue', 'fork' or 'new', got {short_repr(self.kind)}"
            )
        object.__setattr__(self, "kind", str.__str__(self.kind))
        object.__setattr__(self, "program", _held(check_program(self.program)))
        if self.parent is not None:
            object.__setattr__(self, "parent", _held(check_program(self.parent)))
        object.__setattr__(self, "depth_blocks", i64_field("depth_blocks", self.depth_blocks))
        object.__setattr__(self, "context_blocks", i64_field("context_blocks", self.context_blocks))


def _held(key: ProgramKey) -> ProgramKey:
    return str.__str__(key) if isinstance(key, str) else key  # (a str subclass: a plain str)


def check_program(program: Any) -> ProgramKey:
    """A program key: a linker's int key, or a named program's id."""
    if isinstance(program, str):
        return check_id("program", program)
    if isinstance(program, int) and not isinstance(program, bool):
        return int_in("program", program, 1, MAX_PROGRAM_KEY)
    raise TypeError(f"program must be an int or a str, got {type(program).__name__}")


def grid_positions(n: int) -> list[int]:
    """The block positions a turn end of ``n`` blocks records, deepest first (module doc)."""
    out: list[int] = []
    if n <= 0:
        return out
    j = 0
    while True:
        m = (n - 1) >> j
        for r in range(RECORD_PER_LEVEL):
            if m - r >= 0:
                p = (m - r) << j
                if p not in out:
                    out.append(p)
        if m == 0:
            break
        j += 1
    out.sort(reverse=True)
    return out


def probe_limit(n: int) -> int:
    """The most probes a lookup of an ``n``-block prompt makes."""
    return 0 if n <= 0 else 1 + (n - 1).bit_length()


class _Program:
    __slots__ = ("context_blocks", "live", "name", "prompt_blocks", "tenant", "turn_ends")

    def __init__(self, tenant: str, name: str | None) -> None:
        self.tenant = tenant
        self.name = name  # a deployment's id, or None for a key the linker made
        self.live = 0  # calls running
        self.turn_ends = 0  # recorded turn ends still held
        self.context_blocks = 0  # its latest turn end's blocks
        self.prompt_blocks = 0  # of which its prompt's


class _Entry:
    __slots__ = ("ambiguous", "program", "refs", "time_s")

    def __init__(self, program: int, time_s: float) -> None:
        self.program = program  # serial of the program that recorded it first
        self.refs = 1  # turn ends holding it
        self.ambiguous = False  # recorded by two programs or more
        self.time_s = time_s  # its newest turn end's time


class _TurnEnd:
    __slots__ = ("dropped", "hashes", "program", "tenant", "time_s")

    def __init__(self, tenant: str, program: int, time_s: float, hashes: list[int]) -> None:
        self.tenant = tenant
        self.program = program
        self.time_s = time_s
        self.hashes = hashes
        self.dropped = False  # (dropped: still in a queue until it reaches its front)


class _Tenant:
    """A tenant's share of the bounded state: its programs, least recently used first, and its
    turn ends, oldest first (dropped ones skipped)."""

    __slots__ = ("ends", "live_ends", "peak", "programs")

    def __init__(self) -> None:
        self.programs: OrderedDict[int, None] = OrderedDict()
        self.peak = 0  # the most programs held since ``programs`` was made (its table's size)
        self.ends: deque[_TurnEnd] = deque()
        self.live_ends = 0


def _reader(field: str, hashes: Any) -> tuple[int, Callable[[int], int]]:
    """(length, item reader) of a sequence of block hashes; only read items are checked."""
    if isinstance(hashes, (str, bytes, bytearray)) or not hasattr(hashes, "__getitem__"):
        raise TypeError(f"{field} must be a sequence of integers, got {type(hashes).__name__}")
    try:
        n = len(hashes)
    except TypeError:
        raise TypeError(
            f"{field} must be a sequence of integers, got {type(hashes).__name__}"
        ) from None
    if n > MAX_PROMPT_BLOCKS:
        raise ValueError(f"{field} must be at most {MAX_PROMPT_BLOCKS} blocks, got {n}")

    def item(i: int) -> int:
        v = hashes[i]
        if isinstance(v, bytes):
            return int.from_bytes(v[:8], "little")
        name = f"{field}[{i}]"
        if isinstance(v, float):
            raise TypeError(f"{name} must be an integer or bytes, got {short_repr(v)}")
        try:
            h = int(operator.index(v))
        except TypeError:
            raise TypeError(f"{name} must be an integer or bytes, got {short_repr(v)}") from None
        if not HASH_MIN <= h < HASH_LIMIT:
            raise ValueError(
                f"{name} must be in [{HASH_MIN}, {HASH_LIMIT - 1}], got {short_repr(h)}"
            )
        return h & _MASK

    return n, item


@synchronized
class ProgramLinker:
    """Tells a call's program from its prompt's chained block hashes (see the module doc)."""

    def __init__(
        self,
        max_turn_ends: Any = DEFAULT_MAX_TURN_ENDS,
        max_age_s: Any = DEFAULT_MAX_AGE_S,
        max_programs: Any = DEFAULT_MAX_PROGRAMS,
        min_depth_fraction: Any = DEFAULT_MIN_DEPTH_FRACTION,
    ) -> None:
        self._max_turn_ends = int_in("max_turn_ends", max_turn_ends, 1, MAX_TURN_ENDS)
        self._max_age_s = finite("max_age_s", max_age_s)
        if not self._max_age_s > 0.0:
            raise ValueError(f"max_age_s must be > 0, got {self._max_age_s!r}")
        self._max_programs = int_in("max_programs", max_programs, 1, MAX_PROGRAMS)
        self._min_depth_fraction = finite("min_depth_fraction", min_depth_fraction)
        if not 0.0 <= self._min_depth_fraction <= 1.0:
            raise ValueError(
                f"min_depth_fraction must be in [0, 1], got {self._min_depth_fraction!r}"
            )
        self._index: dict[tuple[str, int], _Entry] = {}
        self._turn_ends: deque[_TurnEnd] = deque()  # oldest first (dropped ones skipped)
        self._live_ends = 0  # turn ends kept (not dropped)
        self._programs: OrderedDict[int, _Program] = OrderedDict()  # least recent first
        self._tenants: dict[str, _Tenant] = {}  # tenants holding a program or a turn end
        self._named: dict[tuple[str, str], int] = {}
        self._next_serial = 1
        self._now = -float("inf")

    # -- the decision ---------------------------------------------------------------------
    def link(self, tenant: Any, prompt_hashes: Any, now: Any, program: Any = None) -> Link:
        """The program of a call of ``tenant`` with these prompt block hashes (module doc);
        ``program``: the call's own id, when the deployment allows one (no search)."""
        t = check_id("tenant", tenant)
        n, item = _reader("prompt_hashes", prompt_hashes)
        now_s = self._check_now(now)
        name = None if program is None else check_id("program", program)
        g = self._descend(t, n, item, now_s)
        self._advance(now_s)
        entry = None if g is None else self._index.get((t, item(g)))
        if name is not None:
            serial = self._named.get((t, name))
            kind = "new" if serial is None else "continue"
            if serial is None:
                serial = self._new_program(t, name)
            prog = self._touch(serial)
            prog.live += 1
            depth = 0
            if entry is not None and g is not None and not entry.ambiguous:
                depth = g + 1 if entry.program == serial else 0
            return unchecked(Link, kind, name, None, depth, prog.context_blocks)
        matched = None
        if entry is not None and not entry.ambiguous:
            matched = self._programs.get(entry.program)
        if matched is None or g is None or g + 1 < self._min_depth_fraction * matched.prompt_blocks:
            serial = self._new_program(t, None)
            self._programs[serial].live += 1
            return unchecked(Link, "new", serial, None, 0, 0)
        parent = entry.program  # type: ignore[union-attr]
        if matched.live > 0:
            self._touch(parent)
            parent_key = self._key(parent)
            serial = self._new_program(t, None)
            self._programs[serial].live += 1
            return unchecked(Link, "fork", serial, parent_key, g + 1, matched.context_blocks)
        self._touch(parent).live += 1
        return unchecked(Link, "continue", self._key(parent), None, g + 1, matched.context_blocks)

    def finished(
        self,
        tenant: Any,
        program: Any,
        hashes: Any,
        now: Any,
        prompt_blocks: Any = None,
    ) -> bool:
        """A call of ``program`` ended: records its turn end (``hashes``: its prompt's blocks,
        then its output's; ``prompt_blocks``: how many are the prompt, None: all).  No hashes:
        an aborted call, nothing recorded.  False when the program is unknown (forgotten, or
        an int key the linker did not make); a named program is made when unknown."""
        t = check_id("tenant", tenant)
        key = check_program(program)
        n, item = _reader("hashes", hashes)
        now_s = self._check_now(now)
        k = n if prompt_blocks is None else int_in("prompt_blocks", prompt_blocks, 0, n)
        points: list[int] = []
        for end in (k, n):
            for p in grid_positions(end):
                h = item(p)
                if h not in points:
                    points.append(h)
        self._advance(now_s)
        if isinstance(key, str):
            serial = self._named.get((t, key))
            if serial is None:
                serial = self._new_program(t, key)
        else:
            serial = key
            known = self._programs.get(serial)
            if known is None or known.tenant != t or known.name is not None:
                return False
        prog = self._touch(serial)
        prog.live = max(0, prog.live - 1)
        if not points:
            self._forget_if_idle(serial)
            return True
        prog.turn_ends += 1  # (counted first: making room must not forget this program)
        while self._live_ends >= self._max_turn_ends:
            self._drop(self._end_to_drop(t))
        for h in points:
            e = self._index.get((t, h))
            if e is None:
                self._index[(t, h)] = _Entry(serial, now_s)
            else:
                e.refs += 1
                e.ambiguous = e.ambiguous or e.program != serial
                e.time_s = now_s
        recorded = _TurnEnd(t, serial, now_s, points)
        self._turn_ends.append(recorded)
        own = self._tenant(t)
        own.ends.append(recorded)
        own.live_ends += 1
        self._live_ends += 1
        prog.context_blocks = n
        prog.prompt_blocks = k
        return True

    def end_program(self, tenant: Any, program: Any) -> bool:
        """The program is done: forgotten (a call matching its turn ends starts a new one).
        False: it was not known."""
        t = check_id("tenant", tenant)
        key = check_program(program)
        serial = self._serial(t, key)
        if serial is None:
            return False
        self._remove(serial)
        return True

    # -- views ----------------------------------------------------------------------------
    def running(self, tenant: Any, program: Any) -> int:
        """Calls of the program running (linked, not finished); 0 for an unknown one."""
        t = check_id("tenant", tenant)
        serial = self._serial(t, check_program(program))
        return 0 if serial is None else self._programs[serial].live

    @property
    def turn_end_count(self) -> int:
        """Turn ends kept."""
        return self._live_ends

    @property
    def program_count(self) -> int:
        """Programs tracked."""
        return len(self._programs)

    @property
    def point_count(self) -> int:
        """Index entries (recorded block hashes)."""
        return len(self._index)

    @property
    def max_turn_ends(self) -> int:
        """The most turn ends kept (module doc, "Bounded state": which go first)."""
        return self._max_turn_ends

    @property
    def max_age_s(self) -> float:
        """Seconds a turn end is kept (dropped at the next call later than its time plus this)."""
        return self._max_age_s

    @property
    def max_programs(self) -> int:
        """The most programs tracked (module doc, "Bounded state": which are forgotten first)."""
        return self._max_programs

    @property
    def min_depth_fraction(self) -> float:
        """A match shorter than this fraction of a program's latest prompt starts a new program."""
        return self._min_depth_fraction

    # -- internals ------------------------------------------------------------------------
    def _check_now(self, now: Any) -> float:
        t = finite("now", now)
        if t < self._now:
            raise ValueError(f"now must be >= the last call's now ({self._now!r}), got {t!r}")
        return t

    def _serial(self, tenant: str, key: ProgramKey) -> int | None:
        if isinstance(key, str):
            return self._named.get((tenant, key))
        prog = self._programs.get(key)
        if prog is None or prog.tenant != tenant or prog.name is not None:
            return None
        return key

    def _key(self, serial: int) -> ProgramKey:
        name = self._programs[serial].name
        return serial if name is None else name

    def _descend(self, tenant: str, n: int, item: Callable[[int], int], now_s: float) -> int | None:
        """The deepest recorded point the descent finds (module doc), None when block 0 is
        not recorded.  Changes nothing (an item may be refused on the way): a point whose
        newest turn end is older than ``max_age_s`` counts as dropped already."""

        def recorded(h: int) -> bool:
            e = self._index.get((tenant, h))
            return e is not None and now_s - e.time_s <= self._max_age_s

        if n == 0 or not recorded(item(0)):
            return None
        g = 0
        for j in range((n - 1).bit_length() - 1, -1, -1):
            p = g + (1 << j)
            if p <= n - 1 and recorded(item(p)):
                g = p
        return g

    def _advance(self, now_s: float) -> None:
        self._now = now_s
        while self._live_ends and now_s - _front(self._turn_ends).time_s > self._max_age_s:
            self._drop(_front(self._turn_ends))

    def _end_to_drop(self, tenant: str) -> _TurnEnd:
        """The turn end that makes room for one of ``tenant`` (module doc, "Bounded state")."""
        oldest = _front(self._turn_ends)
        own = self._tenants.get(tenant)
        if own is not None and own.live_ends > self._tenants[oldest.tenant].live_ends:
            return _front(own.ends)
        return oldest

    def _drop(self, end: _TurnEnd) -> None:
        end.dropped = True
        self._live_ends -= 1
        if len(self._turn_ends) > 2 * self._live_ends + 16:  # (dropped ones within bounds)
            self._turn_ends = deque(e for e in self._turn_ends if not e.dropped)
        own = self._tenants[end.tenant]
        own.live_ends -= 1
        if len(own.ends) > 2 * own.live_ends + 16:
            own.ends = deque(e for e in own.ends if not e.dropped)
        for h in end.hashes:
            e = self._index[(end.tenant, h)]
            e.refs -= 1
            if e.refs == 0:
                del self._index[(end.tenant, h)]
        prog = self._programs.get(end.program)
        if prog is not None:
            prog.turn_ends -= 1
            self._forget_if_idle(end.program)
        self._release(end.tenant)

    def _forget_if_idle(self, serial: int) -> None:
        prog = self._programs[serial]
        if prog.live == 0 and prog.turn_ends == 0:
            self._remove(serial)

    def _remove(self, serial: int) -> None:
        prog = self._programs.pop(serial)
        if prog.name is not None:
            del self._named[(prog.tenant, prog.name)]
        own = self._tenants[prog.tenant]
        del own.programs[serial]
        if own.peak > 64 and 4 * len(own.programs) < own.peak:  # (a dict never shrinks)
            own.programs, own.peak = OrderedDict(own.programs), len(own.programs)
        self._release(prog.tenant)

    def _new_program(self, tenant: str, name: str | None) -> int:
        if len(self._programs) >= self._max_programs:
            self._remove(self._program_to_forget(tenant))
        serial = self._next_serial
        self._next_serial += 1
        self._programs[serial] = _Program(tenant, name)
        own = self._tenant(tenant)
        own.programs[serial] = None
        own.peak = max(own.peak, len(own.programs))
        if name is not None:
            self._named[(tenant, name)] = serial
        return serial

    def _touch(self, serial: int) -> _Program:
        self._programs.move_to_end(serial)
        prog = self._programs[serial]
        self._tenants[prog.tenant].programs.move_to_end(serial)
        return prog

    def _program_to_forget(self, tenant: str) -> int:
        """The program that makes room for one of ``tenant`` (module doc, "Bounded state")."""
        oldest = next(iter(self._programs))
        own = self._tenants.get(tenant)
        theirs = self._tenants[self._programs[oldest].tenant]
        if own is not None and len(own.programs) > len(theirs.programs):
            return next(iter(own.programs))
        return oldest

    def _tenant(self, tenant: str) -> _Tenant:
        own = self._tenants.get(tenant)
        if own is None:
            own = self._tenants[tenant] = _Tenant()
        return own

    def _release(self, tenant: str) -> None:
        """Forget ``tenant``'s share once it holds nothing."""
        own = self._tenants.get(tenant)
        if own is not None and not own.programs and not own.live_ends:
            del self._tenants[tenant]


def _front(ends: deque[_TurnEnd]) -> _TurnEnd:
    """The oldest turn end kept in ``ends`` (dropped ones before it are let go)."""
    while ends[0].dropped:
        ends.popleft()
    return ends[0]
