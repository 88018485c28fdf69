"""ttlpolicy: how long an LLM engine should keep an agent program's KV cache.

The public names below are served by the Rust core when it is built (``backend == "rust"``)
and by the pure-Python reference otherwise; both give the same answers.  The reference
classes stay importable from ``ttlpolicy.reference`` for differential testing.
"""

from __future__ import annotations

from ._backend import backend, native
from .config import PolicyConfig
from .reference import estimators as _ref_estimators
from .reference import history as _ref_history
from .reference import policy as _ref_policy
from .reference import solver as _ref_solver

if native is not None:
    ToolHistory = native.ToolHistory
    EtaEstimator = native.EtaEstimator
    OutOfOrderCost = native.OutOfOrderCost
    CacheMissModel = native.CacheMissModel
    PinDecision = native.PinDecision
    TTLPolicy = native.TTLPolicy
    solve_ttl = native.solve_ttl
else:
    ToolHistory = _ref_history.ToolHistory
    EtaEstimator = _ref_estimators.EtaEstimator
    OutOfOrderCost = _ref_estimators.OutOfOrderCost
    CacheMissModel = _ref_estimators.CacheMissModel
    PinDecision = _ref_policy.PinDecision
    TTLPolicy = _ref_policy.TTLPolicy
    solve_ttl = _ref_solver.solve_ttl

# --- scheduler ---
from .reference import scheduler as _ref_scheduler  # noqa: E402

if native is not None:
    ProgramScheduler = native.ProgramScheduler
    Pin = native.Pin
    Finished = native.Finished
    Ended = native.Ended
else:
    ProgramScheduler = _ref_scheduler.ProgramScheduler
    Pin = _ref_scheduler.Pin
    Finished = _ref_scheduler.Finished
    Ended = _ref_scheduler.Ended

__all__ = [
    "backend",
    "PolicyConfig",
    "ToolHistory",
    "EtaEstimator",
    "OutOfOrderCost",
    "CacheMissModel",
    "PinDecision",
    "TTLPolicy",
    "solve_ttl",
    # scheduler
    "ProgramScheduler",
    "Pin",
    "Finished",
    "Ended",
]
