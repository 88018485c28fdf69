"""ttlpolicy for SGLang: ``pip install ttlpolicy-sglang``, ``--radix-cache-backend ttlpolicy``.

Tested against SGLang 0.5.23 exactly (``sglang==0.5.23``).
"""

from __future__ import annotations

from ttlpolicy.serving import AdapterMetrics

from .cache import TTLRadixCache
from .identity import ProgramInfo, program_of
from .plugin import BACKEND, register

__all__ = ["BACKEND", "AdapterMetrics", "ProgramInfo", "TTLRadixCache", "program_of", "register"]
