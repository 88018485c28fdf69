"""Workloads: agent programs (sequences of LLM calls separated by tool or human time) and how
they arrive.

* ``programs_from_trace`` — a session of an agentic trace is a program; turn i+1 is issued
  when turn i finishes plus its recorded think time; the blocks a turn can reuse are the
  common prefix of its block hashes with the previous turn's.  Options cap contexts, scale
  and cap think times, and drop what follows the first human turn.
* ``open_loop_programs`` — Mooncake/Azure request streams: one single-turn program a request,
  issued at its recorded time.
* ``swe_agent_programs`` — a synthetic SWE-agent-like generator with documented parameters.
* ``poisson_arrivals`` / ``ConcurrencyArrivals`` — program arrival processes, seeded.

Turns carry the finished call's ``stop`` reason as its tool name when the trace records no
tool names: an engine sees the stop reason, and tool time and human time differ by minutes.

**The common prefix** (``common_prefix=True``, issue 45): real Claude Code sessions all begin
with the same tool definitions and system prompt, but the traces number their blocks per file,
so that sharing never shows.  With the option, a session's first ``(tool_tokens +
system_tokens) // block_tokens`` blocks (the trace reader's ``common_prefix_tokens``: a main
session's from its file, a sub-agent's its own) are the first blocks of one prefix common to
every session — two sessions share the shorter of their two lengths (a sub-agent's, shorter,
the main sessions' first blocks: one chain, where ``bench/linkage.py --common tools`` gives
sub-agents ids of their own) — kept by the KV cache once (``kv_cache``):
``Program.common_blocks``, and every turn may reuse that many leading blocks (its first turn
from the common chain; later turns keep at least them, as a compaction keeps the system
prompt).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..traces import TraceRecord, read_trace
from ..traces.cache import cached_arrays

MAX_TOOL_NAME = 64


@dataclass(frozen=True, slots=True)
class Turn:
    """One LLM call of a program."""

    input_tokens: int  # whole context
    output_tokens: int
    reusable_blocks: int  # leading full blocks identical to the previous turn's input
    think_s: float  # gap between the previous turn's finish and this turn's issue
    tool: str | None  # what the call ended with (tool name, or stop reason)


@dataclass(frozen=True, slots=True)
class Program:
    program_id: str
    turns: tuple[Turn, ...]
    issue_s: float = 0.0  # open-loop streams: when the (single) request is issued
    common_blocks: int = 0  # its prompts' leading blocks common to every program (module doc)


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...], limit: int) -> int:
    n = min(len(a), len(b), limit)
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def programs_from_records(
    records: Iterable[TraceRecord],
    *,
    block_tokens: int = 64,
    max_context: int | None = None,
    context_mode: str = "truncate",
    think_scale: float = 1.0,
    think_cap_s: float | None = None,
    human_turns: str = "keep",
    common_prefix: bool = False,
) -> list[Program]:
    """Programs from agentic trace records (grouped by session, in order of first appearance).

    ``max_context``: contexts above it are truncated to it (``context_mode="truncate"``, the
    output kept within it too) or their whole program is skipped (``"skip"``).
    ``human_turns="drop"`` ends a program at its first ``end_turn`` (one agentic task).
    ``common_prefix``: a session's first ``common_prefix_tokens`` (its records') are common to
    every session (module doc).
    """
    if context_mode not in ("truncate", "skip"):
        raise ValueError(f"context_mode must be 'truncate' or 'skip', got {context_mode!r}")
    if human_turns not in ("keep", "drop"):
        raise ValueError(f"human_turns must be 'keep' or 'drop', got {human_turns!r}")
    if not think_scale >= 0 or not math.isfinite(think_scale):
        raise ValueError(f"think_scale must be a finite number >= 0, got {think_scale!r}")
    if max_context is not None and max_context < 2 * block_tokens:
        raise ValueError(f"max_context must be >= {2 * block_tokens} tokens, got {max_context!r}")
    sessions: dict[str, list[TraceRecord]] = {}
    for r in records:
        sessions.setdefault(r.session_id, []).append(r)
    out = []
    for sid, recs in sessions.items():
        turns: list[Turn] = []
        prev: tuple[int, ...] = ()
        skip = False
        common = recs[0].common_prefix_tokens // block_tokens if common_prefix else 0
        for r in recs:
            if r.block_tokens and r.block_tokens != block_tokens:
                raise ValueError(
                    f"session {sid!r}: trace blocks are {r.block_tokens} tokens, simulator blocks "
                    f"{block_tokens}; prefix reuse needs them equal"
                )
            inp, outp = r.input_tokens, max(1, r.output_tokens)
            if max_context is not None and inp + outp > max_context:
                if context_mode == "skip":
                    skip = True
                    break
                outp = min(outp, max_context // 2)
                inp = max(1, max_context - outp)
            full = inp // block_tokens
            hashes = r.hash_ids[:full]
            think = r.think_time_s * think_scale
            if think_cap_s is not None:
                think = min(think, think_cap_s)
            reusable = _common_prefix(prev, hashes, full) if turns else 0
            if common:
                reusable = max(reusable, min(common, full))
            turns.append(Turn(inp, outp, reusable, think if turns else 0.0, r.stop))
            prev = hashes
            if human_turns == "drop" and r.stop == "end_turn":
                break
        if not skip and turns:
            out.append(Program(sid, tuple(turns), common_blocks=common))
    return out


def programs_from_trace(
    path: str | Path, *, records: Callable[[], Iterable[TraceRecord]] | None = None, **options
) -> list[Program]:
    """Programs of an agentic trace file or folder (see ``programs_from_records``); parsed once
    per trace content and options, then loaded from the trace cache (``traces.cache``).
    ``records``: what reads the trace's records on a parse (default ``read_trace(path)``; the
    CLI passes a reader that reports its progress)."""
    read = records if records is not None else lambda: read_trace(path)
    if "common_prefix" in options and not options["common_prefix"]:
        # (off: the same cache entry as without the option)
        options = {k: v for k, v in options.items() if k != "common_prefix"}
    arrays = cached_arrays(
        "programs",
        path,
        options,
        lambda: _program_arrays(programs_from_records(read(), **options)),
    )
    return _programs_of_arrays(arrays)


#: a turn without a tool, in the tool column of the cached arrays
_NO_TOOL = -1


def _program_arrays(programs: list[Program]) -> dict[str, np.ndarray]:
    """Programs as arrays, one row per turn; tool names as an index into a name table."""
    tools: dict[str, int] = {}
    rows = []
    for p in programs:
        for t in p.turns:
            code = _NO_TOOL if t.tool is None else tools.setdefault(t.tool, len(tools))
            rows.append((t.input_tokens, t.output_tokens, t.reusable_blocks, code))
    return {
        "turn_ints": np.array(rows, dtype=np.int64).reshape(-1, 4),
        "think_s": np.array([t.think_s for p in programs for t in p.turns], dtype=np.float64),
        "issue_s": np.array([p.issue_s for p in programs], dtype=np.float64),
        "turns": np.array([len(p.turns) for p in programs], dtype=np.int64),
        "common_blocks": np.array([p.common_blocks for p in programs], dtype=np.int64),
        "ids": np.array([p.program_id for p in programs], dtype=np.str_),
        "tools": np.array(list(tools), dtype=np.str_),
    }


def _programs_of_arrays(a: dict[str, np.ndarray]) -> list[Program]:
    tool_names = [str(x) for x in a["tools"]]
    ints = a["turn_ints"].tolist()
    think = a["think_s"].tolist()
    counts = a["turns"].tolist()
    # (arrays cached before the common prefix have none)
    common = a["common_blocks"].tolist() if "common_blocks" in a else [0] * len(counts)
    out, i = [], 0
    for pid, n, issue, shared in zip(
        a["ids"].tolist(), counts, a["issue_s"].tolist(), common, strict=True
    ):
        turns = tuple(
            Turn(inp, outp, reuse, th, None if code == _NO_TOOL else tool_names[code])
            for (inp, outp, reuse, code), th in zip(ints[i : i + n], think[i : i + n], strict=True)
        )
        out.append(Program(pid, turns, issue, shared))
        i += n
    return out


def open_loop_programs(
    records: Iterable[TraceRecord], *, rate_scale: float = 1.0, max_context: int | None = None
) -> list[Program]:
    """A request stream (Mooncake, Azure) as single-turn programs issued at their recorded
    time divided by ``rate_scale``.  Reuse across requests is not modelled (no program)."""
    if not rate_scale > 0 or not math.isfinite(rate_scale):
        raise ValueError(f"rate_scale must be a finite number > 0, got {rate_scale!r}")
    out = []
    for r in records:
        inp, outp = r.input_tokens, max(1, r.output_tokens)
        if max_context is not None and inp + outp > max_context:
            outp = min(outp, max_context // 2)
            inp = max(1, max_context - outp)
        out.append(
            Program(
                f"req{r.index}", (Turn(max(1, inp), outp, 0, 0.0, None),), r.arrival_s / rate_scale
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class SweAgentParams:
    """A SWE-agent-like program: a system prompt and an issue, then turns that each append the
    model's action and a tool observation; the program ends with a submit.

    Defaults follow the shape of SWE-agent trajectories on SWE-bench (tens of turns, a ~5k-token
    prompt growing by ~1–2k tokens per turn, short tool calls with a long tail for tests)."""

    mean_turns: float = 30.0  # geometric turn count, at least 2
    max_turns: int = 100
    prompt_tokens: int = 5000
    output_mean_tokens: float = 250.0  # exponential, at least 16
    observation_mean_tokens: float = 1200.0  # exponential tool output appended per turn
    #: tool → (median seconds, log-normal sigma, weight)
    tools: tuple[tuple[str, float, float, float], ...] = (
        ("open", 0.3, 0.5, 0.3),
        ("edit", 0.5, 0.5, 0.25),
        ("search", 1.5, 0.8, 0.2),
        ("bash", 3.0, 1.0, 0.15),
        ("pytest", 30.0, 0.8, 0.1),
    )
    max_context: int = 120_000


def swe_agent_programs(
    n: int, seed: int = 0, params: SweAgentParams | None = None, block_tokens: int = 64
) -> list[Program]:
    """``n`` synthetic programs; the same seed gives the same programs."""
    p = params or SweAgentParams()
    rng = random.Random(seed)
    names = [t[0] for t in p.tools]
    weights = [t[3] for t in p.tools]
    out = []
    for i in range(n):
        n_turns = 2
        while n_turns < p.max_turns and rng.random() > 1.0 / max(p.mean_turns - 1.0, 1.0):
            n_turns += 1
        ctx, tool = p.prompt_tokens, None
        turns: list[Turn] = []
        for t in range(n_turns):
            outp = max(16, int(rng.expovariate(1.0 / p.output_mean_tokens)))
            think = 0.0
            if t:
                assert tool is not None  # every turn but the last calls a tool
                spec = p.tools[names.index(tool)]
                think = spec[1] * math.exp(rng.gauss(0.0, spec[2]))
                ctx += max(1, int(rng.expovariate(1.0 / p.observation_mean_tokens)))
            if ctx + outp > p.max_context:
                break
            prev_full = turns[-1].input_tokens // block_tokens if turns else 0
            last = t == n_turns - 1
            tool = None if last else rng.choices(names, weights)[0]
            turns.append(
                Turn(ctx, outp, prev_full if t else 0, think, tool if not last else "submit")
            )
            ctx += outp
        out.append(Program(f"swe{i}", tuple(turns)))
    return out


def poisson_arrivals(
    programs: list[Program], rate_per_s: float, seed: int = 0
) -> Iterator[tuple[float, Program]]:
    """Programs in a seeded random order, arriving as a Poisson process of ``rate_per_s``."""
    if not rate_per_s > 0 or not math.isfinite(rate_per_s):
        raise ValueError(f"rate must be a finite number > 0, got {rate_per_s!r}")
    rng = random.Random(seed)
    order = list(programs)
    rng.shuffle(order)
    t = 0.0
    for prog in order:
        yield t, prog
        t += rng.expovariate(rate_per_s)


class ConcurrencyArrivals:
    """``n`` programs in flight: the first ``n`` (in a seeded order) start at 0, and each time one
    ends the next starts."""

    def __init__(self, programs: list[Program], n: int, seed: int = 0) -> None:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {n!r}")
        rng = random.Random(seed)
        self._order = list(programs)
        rng.shuffle(self._order)
        self._next = 0
        self.n = n

    def initial(self) -> list[Program]:
        first = self._order[: self.n]
        self._next = len(first)
        return first

    def replacement(self) -> Program | None:
        if self._next >= len(self._order):
            return None
        self._next += 1
        return self._order[self._next - 1]
