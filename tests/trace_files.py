"""Where the tests find the full public traces: ``TTLPOLICY_TRACES``, default ``../shared/traces``
beside the repository.  Tests that need them skip elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("TTLPOLICY_TRACES", ROOT.parent / "shared" / "traces"))
MOONCAKE = TRACES / "mooncake" / "conversation_trace.jsonl.gz"
AZURE_CONV = TRACES / "azure" / "AzureLLMInferenceTrace_conv.csv.gz"
SESSIONS = TRACES / "claude-code"
requires_traces = pytest.mark.skipif(not MOONCAKE.is_file(), reason="shared traces not present")
#: First 400 requests of the Mooncake trace, shipped in tests/data (Apache-2.0, licence beside).
MOONCAKE_HEAD = ROOT / "tests" / "data" / "plan_mooncake_head400.jsonl"
