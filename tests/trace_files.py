"""Where the tests find real traces.

The full public traces are found through ``TTLPOLICY_TRACES`` (default ``../shared/traces``
beside the repository).  Without them the tests use the small excerpts shipped in
``tests/data/`` (licences and sources in ``tests/data/NOTICE``), so every test runs on a bare
clone; a ``TTLPOLICY_TRACES`` that is set but lacks the files is an error, not a fallback.
"""

from __future__ import annotations

import gzip
import itertools
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
#: The shipped Mooncake excerpt (also the head of the full trace, line for line).
MOONCAKE_EXCERPT = DATA / "mooncake" / "conversation_trace_head2000.jsonl.gz"
_SET = os.environ.get("TTLPOLICY_TRACES")
TRACES = Path(_SET) if _SET else ROOT.parent / "shared" / "traces"

_FULL = {
    "mooncake": TRACES / "mooncake" / "conversation_trace.jsonl.gz",
    "azure": TRACES / "azure" / "AzureLLMInferenceTrace_conv.csv.gz",
    "sessions": TRACES / "claude-code",
}
FULL = all(p.exists() for p in _FULL.values())
if _SET and not FULL:
    missing = ", ".join(str(p) for p in _FULL.values() if not p.exists())
    raise RuntimeError(f"TTLPOLICY_TRACES={_SET!r} lacks {missing} (unset it to use tests/data)")

if FULL:
    MOONCAKE = _FULL["mooncake"]
    AZURE_CONV = _FULL["azure"]
    SESSIONS = _FULL["sessions"]
    MOONCAKE_REQUESTS = 12_031  # the traces' README
else:
    MOONCAKE = MOONCAKE_EXCERPT
    AZURE_CONV = DATA / "azure" / "AzureLLMInferenceTrace_conv_head1000.csv.gz"
    SESSIONS = DATA / "sessions"
    MOONCAKE_REQUESTS = 2_000  # tests/data/NOTICE


def write_mooncake_head(dest_dir: Path, requests: int = 400) -> Path:
    """The first ``requests`` lines of the Mooncake excerpt, unchanged, as a plain ``.jsonl``
    in ``dest_dir`` (the planner tests need a trace small enough to plan in seconds)."""
    with gzip.open(MOONCAKE_EXCERPT, "rt") as f:
        lines = list(itertools.islice(f, requests))
    out = dest_dir / f"mooncake_head{requests}.jsonl"
    out.write_text("".join(lines))
    return out
