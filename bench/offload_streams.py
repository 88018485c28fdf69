"""Block-hash streams of the public traces for the host-tier replays (vLLM's
``vllm_offload_replay.py`` and SGLang's ``sglang_host_tier.py``): agentic sessions started at
Poisson arrivals, and the Mooncake trace, each request as its blocks' hash ids in time order."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ttlpolicy.traces import HashScopes, read_trace


@dataclass(frozen=True, slots=True)
class Access:
    t_s: float
    request_id: str
    hash_ids: tuple[int, ...]
    last_turn: bool = False


def agentic_stream(
    paths: Iterable[Path], mean_gap_s: float, seed: int = 0, max_requests: int | None = None
) -> list[Access]:
    """Agentic sessions started at Poisson arrivals (mean gap ``mean_gap_s``), merged by time;
    each session's requests keep their own timing, its last one is marked ``last_turn``."""
    rng = random.Random(seed)
    scopes = HashScopes()
    out: list[Access] = []
    start = 0.0
    for n, path in enumerate(sorted(paths)):
        recs = list(read_trace(path))
        last = {rec.session_id: rec.index for rec in recs}  # a file may hold subagents too
        for i, rec in enumerate(recs):
            out.append(
                Access(
                    start + rec.arrival_s,
                    f"s{n}-{i}",
                    scopes.hash_ids(rec),
                    last_turn=rec.index == last[rec.session_id],
                )
            )
        start += rng.expovariate(1.0 / mean_gap_s)
    out.sort(key=lambda a: a.t_s)
    return out[:max_requests] if max_requests is not None else out


def mooncake_stream(path: Path, max_requests: int | None = None) -> list[Access]:
    """The Mooncake trace's requests in time order (global hash ids, no sessions)."""
    out = []
    for i, rec in enumerate(read_trace(path)):
        if max_requests is not None and i >= max_requests:
            break
        out.append(Access(rec.arrival_s, f"m{i}", tuple(rec.hash_ids)))
    return out


def iter_sessions(folder: Path, limit: int | None = None) -> Iterator[Path]:
    paths = sorted(folder.glob("trace_*.json.gz"))
    yield from paths[:limit] if limit is not None else paths
