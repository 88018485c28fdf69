"""The micro-benchmarks find their helpers (``trace_paths``) one folder up, in bench/."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
