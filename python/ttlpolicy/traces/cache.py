"""Compact forms of a trace, cached on disk keyed by the trace files' content, so that a workload
is parsed once, not once per run.

Two forms:

* ``load_block_trace`` — every request as (arrival, input tokens, output tokens, block keys), in
  flat numpy arrays: what the tier planner's store (``ttlpolicy.plan.tiers``) replays.  Keys are the
  trace's block hashes made unique across session files (``readers.HashScopes``), optionally
  coarsened: with ``block_tokens`` = f × the trace's block size, key j of a request is the hash
  of its trace block f·(j+1) − 1 (a prefix matched up to that block matches the whole coarse
  block); a trailing partial coarse block is not cached, as an engine caches full blocks only.
  Agentic sessions (each file a program) start at seeded Poisson times, their requests at the
  recorded offsets; Mooncake/Azure requests at their recorded times.
* ``cached_arrays`` — any arrays a caller builds from a trace, for given options: the engine
  simulator stores its agent programs so (``sim.workload.programs_from_trace``, one row per
  turn), and rebuilds its ``Program`` objects on load.

Where: ``traces/`` under ``cache_root()``: ``$TTLPOLICY_CACHE`` if set, else
``~/.cache/ttlpolicy``.  Key: SHA-256 over the
trace files' bytes (name order), the form's options and ``FORMAT_VERSION``; a changed file or
option gives a new entry, never a stale one.  Entries are written to a temporary file and
renamed, so a crash leaves no half-written entry; an entry that cannot be read anyway (cut
short by a full disk, another version's) is taken as absent and rebuilt.  Delete the folder
to reclaim the space.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .readers import HashScopes, TraceRecord, read_trace, session_files

#: what the readers make of a trace: 3 since a sub-agent keeps its own shared prefix
FORMAT_VERSION = 3
#: Agentic sessions are replayed at this granularity by default (32 blocks of 64 tokens): the
#: 471 sessions hold 61 M trace blocks, too many for a per-block replay inside a search.
DEFAULT_COARSE_TOKENS = 2048


def cache_root() -> Path:
    """``$TTLPOLICY_CACHE``, else ``~/.cache/ttlpolicy`` (trace forms, plan results)."""
    env = os.environ.get("TTLPOLICY_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ttlpolicy"


def cache_dir() -> Path:
    return cache_root() / "traces"


def trace_files(path: str | Path) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        return session_files(p)
    if not p.is_file():
        raise ValueError(f"trace {str(p)!r}: no such file or directory")
    return [p]


def trace_digest(path: str | Path) -> str:
    """SHA-256 over the trace's files (names and bytes, in name order)."""
    h = hashlib.sha256()
    for f in trace_files(path):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _entry(kind: str, digest: str, options: dict) -> Path:
    h = hashlib.sha256()
    h.update(json.dumps([FORMAT_VERSION, kind, options, digest], sort_keys=True).encode())
    return cache_dir() / f"{kind}-{h.hexdigest()[:24]}.npz"


def _cached(
    kind: str, digest: str, options: dict, build: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    entry = _entry(kind, digest, options)
    if entry.is_file():
        try:
            # (the file opened here: np.load leaks its own when the zip does not parse)
            with open(entry, "rb") as fh, np.load(fh, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except Exception:  # (BadZipFile, EOFError, KeyError, ...: a truncated or foreign file)
            pass  # unreadable entry (another version, a disk error, cut short): rebuild it
    arrays = build()
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, entry)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        pass  # a read-only or full cache folder only costs the next run a parse
    return arrays


# ---- the block form (tiered simulator) ----------------------------------------------------


@dataclass(frozen=True)
class BlockTrace:
    """Requests in arrival order; request i's keys are ``keys[offsets[i]:offsets[i+1]]``."""

    arrival_s: np.ndarray  # float64
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    offsets: np.ndarray  # int64, len n + 1
    keys: np.ndarray  # int64
    block_tokens: int  # tokens per key
    digest: str = ""  # identifies trace and options (result caches key on it)

    def __len__(self) -> int:
        return len(self.arrival_s)


def _block_arrays(
    records: Iterable[TraceRecord], block_tokens: int | None, source: str
) -> dict[str, np.ndarray]:
    """Requests in record order; agentic ones with their session's number and in-session time."""
    scopes = HashScopes()
    arrival: list[float] = []
    sizes: list[tuple[int, int]] = []
    lengths: list[int] = []
    keys: list[int] = []
    session_of: list[str] = []
    trace_bt = coarse = 0
    for r in records:
        if not r.hash_ids:
            continue
        if trace_bt == 0:
            trace_bt = r.block_tokens
            coarse = block_tokens or (
                trace_bt if trace_bt >= 512 else max(trace_bt, DEFAULT_COARSE_TOKENS)
            )
            if coarse % trace_bt:
                raise ValueError(
                    f"block_tokens must be a multiple of the trace's {trace_bt}-token blocks, "
                    f"got {coarse}"
                )
        elif r.block_tokens != trace_bt:
            raise ValueError(
                f"{source}: mixed block sizes ({trace_bt} and {r.block_tokens} tokens)"
            )
        f = coarse // trace_bt
        ids = scopes.hash_ids(r)[f - 1 :: f]
        keys.extend(ids)
        lengths.append(len(ids))
        arrival.append(r.arrival_s)
        sizes.append((r.input_tokens, max(1, r.output_tokens)))
        session_of.append(r.session_id.split("/")[0])  # sub-agents start with their parent
    if not arrival:
        raise ValueError(
            f"{source}: no request carries block hashes (hash_ids): nothing to replay "
            "(Azure traces record no prefixes)"
        )
    numbers = {name: i for i, name in enumerate(dict.fromkeys(session_of))}
    offsets = np.zeros(len(arrival) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return {
        "arrival_s": np.array(arrival, dtype=np.float64),
        "session": np.array([numbers[s] if s else -1 for s in session_of], dtype=np.int64),
        "input_tokens": np.array([x[0] for x in sizes], dtype=np.int64),
        "output_tokens": np.array([x[1] for x in sizes], dtype=np.int64),
        "offsets": offsets,
        "keys": np.array(keys, dtype=np.int64),
        "block_tokens": np.array([coarse], dtype=np.int64),
    }


def load_block_trace(
    path: str | Path,
    *,
    block_tokens: int | None = None,
    session_rate_per_s: float | None = None,
    max_requests: int | None = None,
) -> BlockTrace:
    """The block form of a trace file or session folder (cached; see the module doc), in
    arrival order.  ``session_rate_per_s``: agentic session starts per second (Poisson, seed 0;
    default: all within an hour); ``max_requests``: the first N arrivals only."""
    if block_tokens is not None and block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens!r}")
    if session_rate_per_s is not None and not (
        session_rate_per_s > 0 and math.isfinite(session_rate_per_s)
    ):
        raise ValueError(
            f"session_rate_per_s must be a finite number > 0, got {session_rate_per_s}"
        )
    if max_requests is not None and max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests!r}")
    files_digest = trace_digest(path)
    a = _cached(
        "blocks",
        files_digest,
        {"block_tokens": block_tokens},
        lambda: _block_arrays(read_trace(path), block_tokens, str(path)),
    )
    arrival, session = a["arrival_s"], a["session"]
    n_sessions = int(session.max()) + 1
    if n_sessions > 0:
        rate = session_rate_per_s or n_sessions / 3600.0
        rng = random.Random(0)
        starts = np.zeros(n_sessions)
        for i in range(1, n_sessions):
            starts[i] = starts[i - 1] + rng.expovariate(rate)
        arrival = arrival + np.where(session >= 0, starts[np.maximum(session, 0)], 0.0)
    order = np.argsort(arrival, kind="stable")[:max_requests]
    lengths = np.diff(a["offsets"])[order]
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # key positions of the reordered requests, request after request
    take = np.repeat(a["offsets"][:-1][order] - offsets[:-1], lengths) + np.arange(offsets[-1])
    options = {"block_tokens": block_tokens, "session_rate_per_s": session_rate_per_s}
    digest = hashlib.sha256(
        json.dumps([files_digest, options, len(order)], sort_keys=True).encode()
    ).hexdigest()[:24]
    return BlockTrace(
        arrival[order],
        a["input_tokens"][order],
        a["output_tokens"][order],
        offsets,
        a["keys"][take],
        int(a["block_tokens"][0]),
        digest,
    )


# ---- other forms (the engine simulator's programs: ``sim.workload.programs_from_trace``) --------


def cached_arrays(
    form: str, path: str | Path, options: dict, build: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """``build()``'s arrays, from the cache when the trace at ``path`` and ``options`` are
    unchanged.  ``form`` names what the arrays hold (entries of two forms never meet); the
    caller turns them into its objects, so this module knows no consumer's types."""
    return _cached(form, trace_digest(path), options, build)
