"""vLLM with KV offloading to CPU memory: as ``vllm``, but blocks evicted from the GPU are
kept in a CPU tier (LRU) and reloaded over PCIe on a prefix hit instead of recomputed.
Source: vLLM's CPU offloading connector (``--kv-offloading-size``; ``OffloadingConnector``)
and LMCache's CPU backend."""

from __future__ import annotations

from .vllm import VLLM


class VLLMOffload(VLLM):
    name = "vllm-offload"
    uses_cpu_tier = True
