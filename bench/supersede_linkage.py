"""Could a prompt release another program's pin when ids are inferred (issue 45 part 3)?

A compaction without an id links as a new program (``ProgramLinker``: it keeps less than
``min_depth_fraction`` of its program's latest prompt), so its old program's pin lapses at its
TTL.  A candidate rule: a call that matches one program's recorded prompt *beyond what other
programs share* (an unambiguous point) but diverges before the continuation share supersedes
that program's context.  Sub-agents do the same (they share their parent's prefix, then
diverge) while the parent still needs its pin.  This measures, on the agentic sessions (hash
ids scoped per file, so only programs of one file can share blocks; sub-agents are sessions of
their own, as in bench/linkage.py), for each call whose deepest unambiguous match is such a
partial one: whether the matched program is the call's own session (a compaction: releasing
is right) or another (a fork), and whether the matched program's *next* call continued the
context the rule would have released (a release that costs a hit).

Matching is by full prompt, not the linker's probes: for each call, the session (of its file)
whose latest finished prompt shares the longest prefix with it; ambiguous when another session
shares as long a prefix.  This is the rule's best case: the linker records sparse grid
points, so a block every session shares is often recorded by one program only, and the
linker's own answer misattributes far more (docs/investigations/supersede.md).

    python bench/supersede_linkage.py [--common none|tools|8|32]

``--common``: as bench/linkage.py, the first blocks of every session made common (the Claude
Code tools and system prompt every session shares; ``tools``: the call's session's own, a
sub-agent's its own): a match no deeper is ambiguous.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

import numpy as np

from linkage import SESSIONS_CACHE, _build_sessions
from trace_paths import missing_message, traces_dir
from ttlpolicy.pin_claims import continues_context
from ttlpolicy.traces.cache import cached_arrays


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n


def file_candidates(
    a: dict[str, Any], calls: list[int], starts: np.ndarray, common: np.ndarray
) -> Counter[str]:
    """The partial matches among one file's ``calls`` (module doc), counted by kind; a match
    of call ``i`` no deeper than ``common[i]`` blocks (a prefix every session shares) is
    ambiguous."""
    c: Counter[str] = Counter()
    prompt = lambda i: a["ids"][starts[i] : starts[i + 1]]  # noqa: E731
    order = sorted(calls, key=lambda i: (a["t"][i], i))
    session_calls: dict[int, list[int]] = {}
    for i in order:
        session_calls.setdefault(int(a["session"][i]), []).append(i)
    latest: dict[int, int] = {}  # session -> its latest call finished before now
    pending: list[tuple[float, int]] = []  # (finish, call)
    for i in order:
        now = float(a["t"][i])
        for end, j in sorted(pending):
            if end <= now:
                latest[int(a["session"][j])] = j
        pending = [(e, j) for e, j in pending if e > now]
        p = prompt(i)
        matches = sorted(
            ((common_prefix(prompt(j), p), s) for s, j in latest.items()), reverse=True
        )
        pending.append((now + float(a["api"][i]), i))
        if not matches or matches[0][0] == 0:
            continue
        depth, s_star = matches[0]
        if (len(matches) > 1 and matches[1][0] == depth) or depth <= common[i]:
            continue  # ambiguous: another program shares as much
        pinned = len(prompt(latest[s_star]))
        if continues_context(pinned, min(depth, pinned)):
            continue  # a continuation (or a fork of one): not a candidate
        own = s_star == int(a["session"][i])
        c["candidates"] += 1
        c["own" if own else "other"] += 1
        # did the matched program's next call (after this one) continue the context?
        later = [j for j in session_calls[s_star] if a["t"][j] > now or j == i]
        nxt = next((j for j in later if j != i), None) if own else (later[0] if later else None)
        if nxt is not None:
            kept = common_prefix(prompt(latest[s_star]), prompt(nxt))
            if continues_context(pinned, min(kept, pinned)):
                c["other_returned" if not own else "own_returned"] += 1
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--common",
        default="none",
        help="blocks every session shares (bench/linkage.py): none, tools, or a number",
    )
    args = ap.parse_args()
    folder = traces_dir() / "claude-code"
    if not folder.is_dir():
        print(missing_message(folder), file=sys.stderr)
        return 2
    a = cached_arrays(SESSIONS_CACHE, folder, {}, lambda: _build_sessions(folder))
    starts = np.concatenate([[0], np.cumsum(a["len"])])
    by_file: dict[int, list[int]] = {}
    for i in range(len(a["len"])):
        by_file.setdefault(int(a["file_no"][i]), []).append(i)
    total: Counter[str] = Counter()
    if args.common == "tools":
        common = a["common"]  # (each call's session's own: bench/linkage.py's)
    else:
        common = np.full(len(a["len"]), 0 if args.common == "none" else int(args.common))
    for calls in by_file.values():
        total += file_candidates(a, calls, starts, common)
    total["calls"] = len(a["len"])
    print(json.dumps(dict(total)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
