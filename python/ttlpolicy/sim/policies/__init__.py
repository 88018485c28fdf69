"""Simulated policies, one module each, behind one interface (``sim.interface.Policy``).

``make_policy("fixed-ttl=5")`` builds one from its command-line name.
"""

from __future__ import annotations

from ..interface import Policy
from .alone import Alone
from .autellix import Autellix
from .clairvoyant import make_clairvoyant
from .continuum import Continuum
from .fixed_ttl import FixedTTL
from .infercept import InferCept
from .kvflow import KVFlow
from .mori import Mori
from .tokencake import Tokencake
from .vllm import VLLM
from .vllm_offload import VLLMOffload

NAMES = (
    "vllm",
    "vllm-offload",
    "infercept",
    "autellix",
    "fixed-ttl=<s>",
    "continuum",
    # 2026's rivals, with the CPU tier (issue 46): idleness tiers, function-call offload
    # with predictive upload, workflow-aware eviction with prefetch
    "mori",
    "tokencake",
    "kvflow",
    # MORI without its CPU tier's admission control (an ablation)
    "mori:no-admission",
    "ttlpolicy",
    "ttlpolicy-offload",
    "cachettl",
    "static-ttl",
    "program-fcfs",
    # the published model with program-FCFS reclaim (a waiting call takes younger pins only)
    "cachettl:fcfs-reclaim",
    "static-ttl:fcfs-reclaim",
    # ablations (also on ttlpolicy-offload, and '+'-joined): the named mechanism switched off
    "ttlpolicy:admission",
    "ttlpolicy:evict",
    "ttlpolicy:pins",
    "ttlpolicy:classic",  # the model before load control
    # ttlpolicy-offload serving returning calls in program order, not by attained service
    "ttlpolicy-offload:order",
    # ttlpolicy-offload parking chains in the CPU tier during tool calls, copied back ahead
    # of the predicted return (issue 46; +-joinable)
    "ttlpolicy-offload:park",
    "ttlpolicy-offload:park-hold",
    # the park rule timed by each call's real next gap: a bound that reads the future
    "ttlpolicy-offload:park-oracle",
    # a lost prefix priced at the simulator's exact prefill time, not as the adapters price
    # it (the default; "ttlpolicy:adapter" names the default explicitly)  (+-joinable)
    "ttlpolicy:exact",
    # program ids the policy sees, for clients that send none (issue 45; +-joinable): linked
    # from the prompt's block hashes (``ProgramLinker``), or none (each call its own program)
    "ttlpolicy:inferred-ids",
    "ttlpolicy:no-ids",
    # bounds that read the trace's future (never a default): each program on an engine of
    # its own; exact pins, Belady eviction, admission by real footprint (a strong heuristic)
    "alone",
    "clairvoyant",
    # the clairvoyant bound with one oracle mechanism switched off ('+'-joinable)
    "clairvoyant:pins",
    "clairvoyant:evict",
    "clairvoyant:admission",
    "clairvoyant:sizes",
)
#: the published model, its ablation rows, and its reclaim variant
CACHETTL_NAMES = (
    "cachettl",
    "static-ttl",
    "program-fcfs",
    "cachettl:fcfs-reclaim",
    "static-ttl:fcfs-reclaim",
)
SIMPLE = {
    "vllm": VLLM,
    "vllm-offload": VLLMOffload,
    "infercept": InferCept,
    "autellix": Autellix,
    "continuum": Continuum,
    "mori": Mori,
    "tokencake": Tokencake,
    "kvflow": KVFlow,
    "alone": Alone,
}


def make_policy(name: str) -> Policy:
    """A fresh policy from its name (policies keep state: one per run)."""
    name = name.strip()
    if name in SIMPLE:
        return SIMPLE[name]()
    base, _, variant = name.partition(":")
    if base in ("ttlpolicy", "ttlpolicy-offload"):
        from .ttlpolicy_park import is_park, make_park
        from .ttlpolicy_plugin import make_ttlpolicy

        return make_park(base, variant) if is_park(variant) else make_ttlpolicy(base, variant)
    if base == "clairvoyant":
        return make_clairvoyant(variant)
    if name in CACHETTL_NAMES:
        from .cachettl import make_cachettl

        return make_cachettl(base, variant)
    if name == "mori:no-admission":
        mori = Mori()
        mori.tier_admission = False
        mori.name = name
        return mori
    if name.startswith("fixed-ttl="):
        text = name.split("=", 1)[1]
        try:
            seconds = float(text)
        except ValueError:
            raise ValueError(f"fixed-ttl needs seconds, e.g. fixed-ttl=5, got {name!r}") from None
        return FixedTTL(seconds)
    raise ValueError(f"unknown policy {name[:64]!r}; known: {', '.join(NAMES)}")


__all__ = ["NAMES", "Policy", "make_policy"]
