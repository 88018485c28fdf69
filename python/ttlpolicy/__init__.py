"""ttlpolicy: how long an LLM engine should keep an agent program's KV cache.

The public names below are served by the Rust core when it is built (``backend == "rust"``)
and by the pure-Python reference otherwise; both give the same answers.  The reference
classes stay importable from ``ttlpolicy.reference`` for differential testing.  ``native`` is
the native module serving them (None on the reference backend), for callers that use its
extras (the simulator's step timer, ``sim.hardware.native_steps``).
"""

from __future__ import annotations

from importlib import metadata as _metadata

from ._backend import backend, native
from .config import PolicyConfig
from .groups.online import OnlineGroupTTL as OnlineGroupTTL  # online Kareto group TTLs
from .reference import admission as _ref_admission
from .reference import estimators as _ref_estimators
from .reference import history as _ref_history
from .reference import lifecycle as _ref_lifecycle
from .reference import linker as _ref_linker
from .reference import policy as _ref_policy
from .reference import prefix_tree as _ref_prefix_tree
from .reference import router as _ref_router
from .reference import scheduler as _ref_scheduler
from .reference import solver as _ref_solver

try:  # one source: the installed distribution's version (Cargo.toml's workspace version)
    __version__ = _metadata.version("ttlpolicy")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

if native is not None:
    # decision core
    ToolHistory = native.ToolHistory
    EtaEstimator = native.EtaEstimator
    OutOfOrderCost = native.OutOfOrderCost
    CacheMissModel = native.CacheMissModel
    PinDecision = native.PinDecision
    TTLPolicy = native.TTLPolicy
    solve_ttl = native.solve_ttl
    # scheduling state
    ProgramScheduler = native.ProgramScheduler
    Pin = native.Pin
    Finished = native.Finished
    Ended = native.Ended
    # prefix tree (Kareto group TTLs)
    PrefixTree = native.PrefixTree
    GroupStats = native.GroupStats
    # program-level load control (admission, eviction order)
    AdmissionControl = native.AdmissionControl
    # a program's life on one engine (joins the two above)
    ProgramLifecycle = native.ProgramLifecycle
    # which instance serves a program's call, when many serve one workload
    ProgramRouter = native.ProgramRouter
    # which program a call without a program id belongs to, from its prompt's block hashes
    ProgramLinker = native.ProgramLinker
    Link = native.Link
else:
    ToolHistory = _ref_history.ToolHistory
    EtaEstimator = _ref_estimators.EtaEstimator
    OutOfOrderCost = _ref_estimators.OutOfOrderCost
    CacheMissModel = _ref_estimators.CacheMissModel
    PinDecision = _ref_policy.PinDecision
    TTLPolicy = _ref_policy.TTLPolicy
    solve_ttl = _ref_solver.solve_ttl
    ProgramScheduler = _ref_scheduler.ProgramScheduler
    Pin = _ref_scheduler.Pin
    Finished = _ref_scheduler.Finished
    Ended = _ref_scheduler.Ended
    PrefixTree = _ref_prefix_tree.PrefixTree
    GroupStats = _ref_prefix_tree.GroupStats
    AdmissionControl = _ref_admission.AdmissionControl
    ProgramLifecycle = _ref_lifecycle.ProgramLifecycle
    ProgramRouter = _ref_router.ProgramRouter
    ProgramLinker = _ref_linker.ProgramLinker
    Link = _ref_linker.Link

#: What an engine tells ``finish`` about a turn's end: one class for both backends (the native
#: binding reads its fields), like ``PolicyConfig``.
TurnEnd = _ref_scheduler.TurnEnd

__all__ = [
    "AdmissionControl",
    "CacheMissModel",
    "Ended",
    "EtaEstimator",
    "Finished",
    "GroupStats",
    "Link",
    "OutOfOrderCost",
    "Pin",
    "PinDecision",
    "PolicyConfig",
    "PrefixTree",
    "ProgramLifecycle",
    "ProgramLinker",
    "ProgramRouter",
    "ProgramScheduler",
    "TTLPolicy",
    "ToolHistory",
    "TurnEnd",
    "backend",
    "solve_ttl",
]
