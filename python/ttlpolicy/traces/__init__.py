"""Traces: readers of the public trace formats into one record stream (``readers``), and
compact forms of a parsed trace cached on disk by content hash (``cache``).

The readers' names are served here (``from ttlpolicy.traces import read_trace, sample_dir``);
the cache is imported as ``ttlpolicy.traces.cache`` (it needs numpy, the readers do not).
"""

from .readers import (
    MAX_TEXT_CHARS,
    MOONCAKE_BLOCK_TOKENS,
    PROGRAM_FORMATS,
    TRACELAB_BLOCK_TOKENS,
    HashScopes,
    TraceFormatError,
    TraceRecord,
    detect_format,
    has_programs,
    read_agentic,
    read_azure,
    read_mooncake,
    read_trace,
    read_tracelab,
    resolve_trace,
    sample_dir,
)
from .records import open_text

__all__ = [
    "MAX_TEXT_CHARS",
    "MOONCAKE_BLOCK_TOKENS",
    "PROGRAM_FORMATS",
    "TRACELAB_BLOCK_TOKENS",
    "HashScopes",
    "TraceFormatError",
    "TraceRecord",
    "detect_format",
    "has_programs",
    "open_text",
    "read_agentic",
    "read_azure",
    "read_mooncake",
    "read_trace",
    "read_tracelab",
    "resolve_trace",
    "sample_dir",
]
