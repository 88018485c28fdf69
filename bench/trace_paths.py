"""Where the benchmarks find the full public traces: ``TTLPOLICY_TRACES``, default
``../shared/traces`` beside the repository (folders ``mooncake/``, ``azure/``,
``claude-code/``; see docs/design.md, "Traces")."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def traces_dir() -> Path:
    set_to = os.environ.get("TTLPOLICY_TRACES")
    return Path(set_to) if set_to else ROOT.parent / "shared" / "traces"


def missing_message(path: Path) -> str:
    how = "TTLPOLICY_TRACES" if os.environ.get("TTLPOLICY_TRACES") else "the default"
    return (
        f"trace not found: {path} (from {how}); set TTLPOLICY_TRACES to the folder that holds "
        "the public traces (mooncake/, azure/, claude-code/)"
    )
