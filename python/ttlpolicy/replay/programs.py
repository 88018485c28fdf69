"""The programs a replay plays: the simulator's programs of a trace (``sim.workload``: turns,
tool gaps, context caps), each call with the trace's block hashes, made unique across session
files (``traces.HashScopes``), from which its prompt is built (``replay.prompts``).

Request streams (Mooncake, Azure) become one-call programs issued at their recorded times, as
``ttlpolicy compare`` replays them; a Mooncake request keeps its hashes, so requests sharing
prefixes share them on the server too.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..sim.workload import (
    ConcurrencyArrivals,
    Program,
    open_loop_programs,
    poisson_arrivals,
    programs_from_records,
)
from ..traces import HashScopes, TraceRecord, has_programs, read_trace

#: Most programs one replay reads from a trace (a bound on memory: each call keeps its hashes).
MAX_PROGRAMS = 10_000


@dataclass(frozen=True, slots=True)
class Call:
    """One request of a program, as sent."""

    input_tokens: int
    output_tokens: int
    think_s: float  # the trace's gap before this call (0 for the first), before --time-scale
    tool: str | None  # what the call ended with in the trace (tool name or stop reason)
    hash_ids: tuple[int, ...]  # the call's full blocks (global ids)
    common_blocks: int = 0  # its first blocks that are the warm shared prefix's (--warm-prefix)


@dataclass(frozen=True, slots=True)
class ReplayProgram:
    program_id: str
    calls: tuple[Call, ...]
    block_tokens: int  # tokens per hash id (0: no hashes; every prompt unique)
    issue_s: float = 0.0  # request streams: the recorded arrival


@dataclass(frozen=True, slots=True)
class Workload:
    programs: list[ReplayProgram]
    sim_programs: list[Program]  # the simulator's programs they were made from (same ids)
    open_loop: bool  # a request stream: one-call programs at their recorded times
    warm_blocks: int = 0  # blocks of the warm shared prefix (the longest any call begins with)

    def poisson(self, rate_per_s: float, seed: int) -> list[tuple[float, ReplayProgram]]:
        """The simulator's Poisson arrivals (``sim.workload.poisson_arrivals``, same seed,
        same order and times as ``ttlpolicy compare --rate``)."""
        by_id = {p.program_id: p for p in self.programs}
        return [
            (t, by_id[p.program_id])
            for t, p in poisson_arrivals(self.sim_programs, rate_per_s, seed)
        ]

    def recorded(self, rate_scale: float) -> list[tuple[float, ReplayProgram]]:
        """A request stream at its recorded times divided by ``rate_scale``."""
        return sorted(((p.issue_s / rate_scale, p) for p in self.programs), key=lambda x: x[0])

    def closed(self, seed: int, *, cycle: bool = False) -> ClosedSource:
        """The programs of a closed loop (see ``ClosedSource``)."""
        return ClosedSource(self, seed, cycle)


class ClosedSource:
    """The next program of a closed loop, in the simulator's order
    (``sim.workload.ConcurrencyArrivals``, same seed), with a copy prefix for its ids and
    prompts; ``cycle``: when all have run, again in a new order as new copies (new ids, new
    text: copies share nothing).  Called as ``source()``; None when none is left."""

    def __init__(self, workload: Workload, seed: int, cycle: bool) -> None:
        self._by_id = {p.program_id: p for p in workload.programs}
        self._sim, self._seed, self._cycle = workload.sim_programs, seed, cycle
        self._round = 0
        self._arrivals = ConcurrencyArrivals(self._sim, 1, seed)
        self._pending = self._arrivals.initial()
        self._lock = threading.Lock()

    def __call__(self) -> tuple[ReplayProgram, str] | None:
        with self._lock:
            got = self._pending.pop() if self._pending else self._arrivals.replacement()
            if got is None:
                if not self._cycle:
                    return None
                self._round += 1
                self._arrivals = ConcurrencyArrivals(self._sim, 1, self._seed + self._round)
                got = self._arrivals.initial()[0]
            copy = f"c{self._round}/" if self._round else ""
            return self._by_id[got.program_id], copy


def _first_sessions(records: Iterable[TraceRecord], limit: int) -> Iterator[TraceRecord]:
    """Records of the first ``limit`` top-level sessions (sub-agents go with their session)."""
    seen: set[str] = set()
    for r in records:
        top = r.session_id.split("/")[0]
        if top not in seen:
            if len(seen) >= limit:
                return
            seen.add(top)
        yield r


def load_programs(
    trace: str | Path,
    *,
    max_programs: int,
    max_context: int,
    context_mode: str = "truncate",
    think_cap_s: float | None = 300.0,
    human_turns: str = "keep",
    max_output_tokens: int | None = None,
    warm_prefix: str | int | None = None,
) -> Workload:
    """The programs of the trace at ``trace``: at most ``max_programs`` sessions (or
    requests of a stream), contexts capped at ``max_context`` tokens as the simulator caps
    them, outputs at ``max_output_tokens``.  ``warm_prefix``: each program's first tokens are
    one prefix common to all (``"trace"``: its session file's ``tool_tokens +
    system_tokens``; an int: that many tokens), in whole blocks (``common_prefix_blocks``)."""
    if not 1 <= max_programs <= MAX_PROGRAMS:
        raise ValueError(f"max_programs must be in [1, {MAX_PROGRAMS}], got {max_programs}")
    programs_trace = has_programs(trace)
    if programs_trace:
        records = list(_first_sessions(read_trace(trace), max_programs))
    else:
        records = list(itertools.islice(read_trace(trace), max_programs))
    if not records:
        raise ValueError(f"no requests in {str(trace)!r}")
    block_tokens = next((r.block_tokens for r in records if r.hash_ids), 0)
    common = common_prefix_blocks(records, warm_prefix, block_tokens)
    scopes = HashScopes()
    hashes = [scopes.hash_ids(r) for r in records]
    if programs_trace:
        sim_programs = programs_from_records(
            records,
            block_tokens=block_tokens or 64,
            max_context=max_context,
            context_mode=context_mode,
            think_cap_s=think_cap_s,
            human_turns=human_turns,
        )
        by_session: dict[str, list[tuple[tuple[int, ...], int]]] = {}
        for r, h, c in zip(records, hashes, common, strict=True):
            by_session.setdefault(r.session_id, []).append((h, c))
        # A program's turns are its session's first records, in order (workload's contract).
        sessions = [by_session[p.program_id] for p in sim_programs]
    else:
        sim_programs = open_loop_programs(records, max_context=max_context)
        sessions = [[hc] for hc in zip(hashes, common, strict=True)]
    out = []
    for p, session_hashes in zip(sim_programs, sessions, strict=True):
        calls = []
        for t, (h, c) in zip(p.turns, session_hashes, strict=False):
            full = t.input_tokens // block_tokens if block_tokens else 0
            out_tokens = t.output_tokens
            if max_output_tokens is not None:
                out_tokens = min(out_tokens, max_output_tokens)
            calls.append(
                Call(t.input_tokens, out_tokens, t.think_s, t.tool, h[:full], min(c, full))
            )
        out.append(ReplayProgram(p.program_id, tuple(calls), block_tokens, p.issue_s))
    if not out:
        raise ValueError(f"no programs in {str(trace)!r} (after --context-mode {context_mode})")
    warm = max((c.common_blocks for p in out for c in p.calls), default=0)
    return Workload(out, sim_programs, not programs_trace, warm)


def common_prefix_blocks(
    records: list[TraceRecord], warm_prefix: str | int | None, block_tokens: int
) -> list[int]:
    """Per record, its leading blocks that are the warm shared prefix (whole blocks: a
    partial one is the session's own)."""
    if warm_prefix is None:
        return [0] * len(records)
    if not block_tokens:
        raise ValueError("a warm prefix needs a trace with block hashes (this one has none)")
    if warm_prefix == "trace":
        if not any(r.common_prefix_tokens for r in records):
            raise ValueError(
                "--warm-prefix trace: the trace names no shared prefix (session files' "
                "tool_tokens + system_tokens); give a number of tokens"
            )
        return [r.common_prefix_tokens // block_tokens for r in records]
    if isinstance(warm_prefix, str) or warm_prefix < 0:
        raise ValueError(f"warm_prefix must be 'trace' or tokens >= 0, got {warm_prefix!r}")
    return [warm_prefix // block_tokens] * len(records)
