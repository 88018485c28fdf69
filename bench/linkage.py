"""How well ``ProgramLinker`` tells a call's program from its prompt, with ids hidden
(bench/RESULTS.md, "Program linkage").

Agentic sessions (``claude-code/``, 471 files): each file starts at a seeded Poisson time
(``sim.workload.poisson_arrivals``, ``--rate`` files per second), its calls at their recorded
offsets; sub-agent conversations are sessions of their own (the trace reader's rule).  A call
is linked at its arrival and reported finished ``api_time`` later (its prompt's hashes; the
trace records no output hashes), or at its session's next arrival if that comes first.  One
tenant holds every session (the hardest case).  Truth: a call's program is its session.

* a *link* is a ``continue`` or a ``fork`` (both claim the call shares the matched program's
  context); it is correct when the matched program's latest call was of the call's session
  (a session wrongly joined to another program is one false link, and its later calls
  continuing that program are right again).  precision = correct links / links;
* recall = calls continuing a program of their own session / calls that have an earlier
  call in their session;
* a fork within a session splits its identity (counted apart: ``forks_own``).

Hash scopes: the sessions number their blocks per file, so the ~15k-token prefix every Claude
Code session shares (``tool_tokens + system_tokens``) never shows.  ``--common`` makes the first
blocks of every session common ids: ``tools`` = the session's own ``tool_tokens +
system_tokens`` (the trace reader's ``common_prefix_tokens``: a sub-agent's are its own, a
subset of the tools and its type's system prompt) in whole blocks, the same ids in every main
session and other same ids in every sub-agent (whatever its type: the harder case); or a
number of blocks (8, 32), the same ids in every session.  (Before 2026-12-07 ``tools`` gave
sub-agents their parent's prefix — longer than most of their prompts, which so became wholly
common; docs/investigations/program-linkage.md.)

Outputs (``--outputs``): a call is reported finished with its prompt *and its output's*
blocks, as an engine reports it (``finished(..., prompt_blocks=...)``).  The trace records no
output hashes, so a call's ``output_tokens // block_size`` output blocks are taken from where the
session's next call carries them — its blocks after this call's prompt, when it begins with
every block of that prompt — else (no next call, or one that does not extend the prompt)
made ids of the call's own.  That assumes a chat template re-renders an output as the engine
generated it; without ``--outputs`` no output is recorded (as if it never were): the two
bound what a template does.

Mooncake (``--mooncake``): global hashes, shared prefixes, no programs; each request arrives
at its timestamp and finishes ``0.5 s + 25 ms × output tokens`` later.  Every link is counted
and a link is *false* when its request does not begin with every full block of its linked
program's latest prompt (Mooncake hashes a prompt's last, partial block too): a chat's next
turn begins with all of them.

Run: ``python bench/linkage.py [--common tools|8|32] [--outputs] [--rate R] [--mooncake]
[--backend rust|python]``
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from trace_paths import missing_message, traces_dir
from ttlpolicy.reference import linker as ref_linker
from ttlpolicy.sim.workload import Program, poisson_arrivals
from ttlpolicy.traces.cache import cached_arrays
from ttlpolicy.traces.readers import read_agentic, read_mooncake

COMMON_BASE = 1 << 62
#: added to a sub-agent's common ids (``--common tools``): its prefix is not a main session's
SUB_COMMON = 1 << 40
#: the ids of outputs no later call carries (``--outputs``): ``OWN_BASE | call << 20 | block``
OWN_BASE = 1 << 61
#: the trace cache's name for ``_build_sessions``' arrays (bench/supersede_linkage.py's too)
SESSIONS_CACHE = "linkage-sessions-v6"


class Prompt:
    """A call's block hashes, read on demand: the file's local ids made unique per file
    (``file << 32 | id``), the first ``common`` made ``common_base | i``."""

    __slots__ = ("base", "common", "common_base", "ids")

    def __init__(
        self, ids: np.ndarray, base: int, common: int, common_base: int = COMMON_BASE
    ) -> None:
        self.ids, self.base, self.common, self.common_base = ids, base, common, common_base

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> int:
        if i < 0 or i >= len(self.ids):
            raise IndexError(i)
        return self.common_base | i if i < self.common else self.base | int(self.ids[i])

    def full(self) -> list[int]:
        return [self[i] for i in range(len(self.ids))]

    def with_output(self, after: Prompt | None, blocks: int, call: int) -> list[int]:
        """The prompt's hashes, then its ``blocks`` output blocks': those that ``after`` (the
        session's next call) carries after the prompt (``carried_blocks``), then ids of the
        call's own (``call``: its number)."""
        n = len(self.ids)
        carried = carried_blocks(self.ids, None if after is None else after.ids, blocks)
        made = [OWN_BASE | call << 20 | j for j in range(blocks - carried)]
        return self.full() + [after[k] for k in range(n, n + carried)] + made  # type: ignore[index]


def carried_blocks(ids: np.ndarray, next_ids: np.ndarray | None, blocks: int) -> int:
    """How many of a call's ``blocks`` output blocks its session's next call carries after
    the call's prompt ``ids``: none unless that call begins with every block of it."""
    n = len(ids)
    if next_ids is None or len(next_ids) <= n or not np.array_equal(next_ids[:n], ids):
        return 0
    return min(blocks, len(next_ids) - n)


def _build_sessions(folder: Path) -> dict[str, np.ndarray]:
    ids: list[np.ndarray] = []
    rows: dict[str, list[Any]] = {
        k: [] for k in ("len", "t", "api", "session", "file_no", "out_blocks", "common", "sub")
    }
    sessions: dict[str, int] = {}
    files = sorted(x for x in folder.iterdir() if x.name.endswith(".json.gz"))
    for f_no, path in enumerate(files):
        for rec in read_agentic(path):
            s = sessions.setdefault(rec.session_id, len(sessions))
            ids.append(np.asarray(rec.hash_ids, dtype=np.uint32))
            rows["len"].append(len(rec.hash_ids))
            rows["t"].append(rec.arrival_s)
            rows["api"].append(rec.api_time_s or 0.0)
            rows["session"].append(s)
            rows["file_no"].append(f_no)
            rows["out_blocks"].append(rec.output_tokens // rec.block_tokens)
            rows["common"].append(rec.common_prefix_tokens // rec.block_tokens)
            rows["sub"].append("/" in rec.session_id)  # (the reader's name for a sub-agent)
    return {
        "ids": np.concatenate(ids),
        "len": np.asarray(rows["len"], dtype=np.int64),
        "t": np.asarray(rows["t"], dtype=np.float64),
        "api": np.asarray(rows["api"], dtype=np.float64),
        "session": np.asarray(rows["session"], dtype=np.int64),
        "file_no": np.asarray(rows["file_no"], dtype=np.int64),
        "out_blocks": np.asarray(rows["out_blocks"], dtype=np.int64),
        "common": np.asarray(rows["common"], dtype=np.int64),
        "sub": np.asarray(rows["sub"], dtype=np.bool_),
    }


def linker_class(backend: str) -> Any:
    if backend == "python":
        return ref_linker.ProgramLinker
    from ttlpolicy import _native

    return _native.ProgramLinker


def agentic(args: argparse.Namespace) -> dict[str, Any]:
    folder = traces_dir() / "claude-code"
    if not folder.is_dir():
        sys.exit(missing_message(folder))
    a = cached_arrays(SESSIONS_CACHE, folder, {}, lambda: _build_sessions(folder))
    starts = np.concatenate([[0], np.cumsum(a["len"])])
    n_files = int(a["file_no"].max()) + 1
    files = [Program(program_id=str(i), turns=()) for i in range(n_files)]
    file_start = {int(p.program_id): t for t, p in poisson_arrivals(files, args.rate, args.seed)}
    events: list[tuple[float, int, int]] = []  # (time, 0 finish / 1 arrival, call)
    finish_s: dict[int, float] = {}
    next_call: dict[int, int] = {}  # call -> its session's next call
    by_session: dict[int, list[int]] = {}
    for i in range(len(a["len"])):
        by_session.setdefault(int(a["session"][i]), []).append(i)
    arrival = np.array([file_start[int(f)] for f in a["file_no"]]) + a["t"]
    for calls in by_session.values():
        calls.sort(key=lambda i: (arrival[i], i))
        for k, i in enumerate(calls):
            end = arrival[i] + a["api"][i]
            if k + 1 < len(calls):
                end = min(end, arrival[calls[k + 1]])
                next_call[i] = calls[k + 1]
            events.append((float(arrival[i]), 1, i))
            finish_s[i] = float(end)
    heapq.heapify(events)
    linker = linker_class(args.backend)(
        max_age_s=args.max_age_s, min_depth_fraction=args.min_depth_fraction
    )

    def prompt(i: int) -> Prompt:
        f = int(a["file_no"][i])
        ids = a["ids"][starts[i] : starts[i + 1]]
        if args.common == "tools":
            base = COMMON_BASE | (SUB_COMMON if a["sub"][i] else 0)
            return Prompt(ids, (f + 1) << 32, int(a["common"][i]), base)
        return Prompt(ids, (f + 1) << 32, 0 if args.common == "none" else int(args.common))

    def turn_end(i: int) -> Prompt | list[int]:
        """What call ``i``'s finish reports: its prompt, and with ``--outputs`` its output."""
        if not args.outputs:
            return prompt(i)
        j = next_call.get(i)
        after = None if j is None else prompt(j)
        return prompt(i).with_output(after, int(a["out_blocks"][i]), i)

    last_session: dict[Any, int] = {}  # program key -> session of its latest call
    key_of: dict[int, Any] = {}
    seen_sessions: set[int] = set()
    c: Counter[str] = Counter()
    t0 = time.perf_counter()
    while events:
        now, kind, i = heapq.heappop(events)
        s = int(a["session"][i])
        if kind == 0:
            linker.finished("t", key_of.pop(i), turn_end(i), now, int(a["len"][i]))
            continue
        link = linker.link("t", prompt(i), now)
        key_of[i] = link.program
        # (its finish is queued now: at its arrival's time it comes before later arrivals)
        heapq.heappush(events, (max(now, finish_s[i]), 0, i))
        linkable = s in seen_sessions
        seen_sessions.add(s)
        c["calls"] += 1
        c["linkable"] += linkable
        if link.kind == "new":
            last_session[link.program] = s
            c["new"] += 1
            c["new_linkable"] += linkable
            continue
        matched = link.program if link.kind == "continue" else link.parent
        own = last_session[matched] == s
        last_session[link.program] = s
        if not own and args.verbose:
            print("false", link, "first call" if not linkable else "", len(prompt(i)))
        c["links"] += 1
        c["correct"] += own
        if link.kind == "fork":
            c["forks"] += 1
            c["forks_own"] += own
        else:
            c["continue_own"] += own
    c_dict: dict[str, Any] = dict(c)
    c_dict["seconds"] = round(time.perf_counter() - t0, 1)
    c_dict["precision"] = c["correct"] / max(1, c["links"])
    c_dict["recall"] = c["continue_own"] / max(1, c["linkable"])
    c_dict["turn_ends"] = linker.turn_end_count
    c_dict["points"] = linker.point_count
    return c_dict


def mooncake(args: argparse.Namespace) -> dict[str, Any]:
    path = traces_dir() / "mooncake" / "conversation_trace.jsonl.gz"
    if not path.exists():
        sys.exit(missing_message(path))
    recs = list(read_mooncake(path))
    events: list[tuple[float, int, int]] = []
    for i, r in enumerate(recs):
        events.append((r.arrival_s, 1, i))
        events.append((r.arrival_s + 0.5 + 0.025 * r.output_tokens, 0, i))
    heapq.heapify(events)
    linker = linker_class(args.backend)(
        max_age_s=args.max_age_s, min_depth_fraction=args.min_depth_fraction
    )
    key_of: dict[int, Any] = {}
    latest: dict[Any, tuple[int, ...]] = {}  # program -> its latest prompt's full blocks
    c: Counter[str] = Counter()
    while events:
        now, kind, i = heapq.heappop(events)
        h = recs[i].hash_ids
        if kind == 0:
            key = key_of.pop(i)
            linker.finished("t", key, h, now)
            latest[key] = h[: recs[i].input_tokens // recs[i].block_tokens]
            continue
        link = linker.link("t", h, now)
        key_of[i] = link.program
        c["requests"] += 1
        c[link.kind] += 1
        if link.kind != "new":
            matched = link.program if link.kind == "continue" else link.parent
            prev = latest.get(matched, ())
            c["links"] += 1
            c["false"] += h[: len(prev)] != prev
    out: dict[str, Any] = dict(c)
    out["links_pct"] = 100 * c["links"] / c["requests"]
    out["false_pct"] = 100 * c["false"] / c["requests"]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--common", default="none", help="none, tools, or a number of blocks")
    ap.add_argument("--rate", type=float, default=1 / 30, help="session files per second")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-age-s", type=float, default=ref_linker.DEFAULT_MAX_AGE_S)
    ap.add_argument(
        "--min-depth-fraction", type=float, default=ref_linker.DEFAULT_MIN_DEPTH_FRACTION
    )
    ap.add_argument("--outputs", action="store_true", help="report outputs (module doc)")
    ap.add_argument("--mooncake", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--backend", choices=("rust", "python"), default="python")
    args = ap.parse_args(argv)
    result = mooncake(args) if args.mooncake else agentic(args)
    print(
        " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items())
    )


if __name__ == "__main__":
    main()
