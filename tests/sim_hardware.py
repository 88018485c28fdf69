"""The simulator's tests' hardware: a roofline holding exactly so many KV blocks."""

from __future__ import annotations

from ttlpolicy.sim import roofline
from ttlpolicy.sim.hardware import Hardware


def hw_blocks(
    blocks: int, block_tokens: int = 16, cpu_blocks: int = 0, base: Hardware | None = None
) -> Hardware:
    """``base`` (Llama-3.1-8B's roofline on one H100) with ``blocks`` KV blocks of
    ``block_tokens`` tokens, and ``cpu_blocks`` on a CPU tier."""
    hw = base if base is not None else roofline("llama-3.1-8b", "h100-80g")
    per_block = block_tokens * hw.kv_bytes_per_token
    return Hardware(hw.model, hw.gpu, hw.steps, blocks * per_block, cpu_blocks * per_block)
