"""``ttlpolicy.sim``: a trace-driven discrete-event simulator of an LLM engine serving agent
programs, with the published baselines as policy plug-ins.

    hw = roofline("llama-3.1-8b", "h100-80g")
    programs = programs_from_trace(sample_dir())
    result = simulate(hw, "ttlpolicy", programs, rate_per_s=0.05)
"""

from __future__ import annotations

from .engine import Engine
from .hardware import GPUS, MODELS, Hardware, calibrate, roofline
from .interface import EngineConfig, Policy, Verdict
from .metrics import Metrics
from .policies import NAMES as POLICY_NAMES
from .policies import make_policy
from .profile import ProfileError, load_profile, save_profile
from .run import simulate
from .workload import (
    ConcurrencyArrivals,
    Program,
    SweAgentParams,
    Turn,
    open_loop_programs,
    poisson_arrivals,
    programs_from_records,
    programs_from_trace,
    swe_agent_programs,
)

__all__ = [
    "GPUS",
    "MODELS",
    "POLICY_NAMES",
    "ConcurrencyArrivals",
    "Engine",
    "EngineConfig",
    "Hardware",
    "Metrics",
    "Policy",
    "ProfileError",
    "Program",
    "SweAgentParams",
    "Turn",
    "Verdict",
    "calibrate",
    "load_profile",
    "make_policy",
    "open_loop_programs",
    "poisson_arrivals",
    "programs_from_records",
    "programs_from_trace",
    "roofline",
    "save_profile",
    "simulate",
    "swe_agent_programs",
]
