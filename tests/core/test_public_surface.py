"""One public surface: every public name of the two backends (Rust core, Python reference)
has the same members and signatures, every result type the same ==, hash, pickle and repr,
and every bad argument of every call raises the same exception type with the same message,
changing nothing.

Defaults: the native signatures show pyo3's ``...`` for defaults that are the core's
constants (the bindings do not restate them), so default *values* are compared through what
they produce: the views of default-built objects, the results of calls that omit them.
"""

from __future__ import annotations

import inspect
import math
import pickle
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

import ttlpolicy
from parity import (
    NATIVE_TABLES,
    PINNING_MISS_COST_S,
    SHARED,
    assert_same,
    close,
    outcome,
    plain,
)
from ttlpolicy import PolicyConfig

#: The public names both backends serve (``ttlpolicy.__all__`` less the shared ones).
PUBLIC = sorted(set(ttlpolicy.__all__) - SHARED)
#: What the native module has besides: the hook the package calls at import, and the core's
#: tables (read by the parity tests below).
NATIVE_ONLY = set(NATIVE_TABLES)
#: The simulator's step timer, whose reference is ``ttlpolicy.sim.hardware`` (not a public
#: name of the package: tests/sim/test_step_time_native.py holds the two together).
NATIVE_ONLY |= {"StepModel", "StepRun"}


class Opaque:
    """A value no conversion accepts, with a repr that is the same on both backends."""

    def __repr__(self) -> str:
        return "<Opaque>"


NAN, INF = math.nan, math.inf
#: Tried in place of every argument of every call.
BAD = [
    None,
    "8",
    b"1",
    1.5,
    2.0,
    True,
    0,
    -1,
    -1.5,
    NAN,
    INF,
    -INF,
    2**70,
    -(2**70),
    2**1100,
    "x" * 2000,
    [],
    ["a"],
    [1.5],
    [2**64],
    [None],
    np.int64(3),
    np.float64(-2.0),
    np.array([[1, 2]]),
    [np.array([1])],
    np.array([5, 6], dtype=">i8"),
    {(1,): 5.0},
    {(1, 2, 3, 4): 1.0},
    {(1,): "x"},
    Opaque(),
]


# -- objects in a known state, built alike on either backend ----------------------------------


def scheduler(be: Any) -> Any:
    """A scheduler with program A running r1, B pinned (idle in a tool), C waiting on r3."""
    policy = be.TTLPolicy(PolicyConfig(min_tool_samples=1, min_total_samples=1))
    s = be.ProgramScheduler(policy, 100, 10, 4)
    s.arrive("b1", "B", 0.0, 2)
    s.pop(0.0)
    assert s.finish("b1", 0.5, 2, tool="bash", cache_miss_cost_s=PINNING_MISS_COST_S).pinned
    s.arrive("r1", "A", 1.0, 1)
    s.pop(1.0)
    s.arrive("r3", "C", 2.0, 1)
    return s


def admission(be: Any) -> Any:
    """Admission over 100 blocks: A admitted and away on tool a, B waiting for admission."""
    policy = be.TTLPolicy(PolicyConfig(min_tool_samples=1, min_total_samples=1))
    policy.observe_tool("a", 3.0)
    ac = be.AdmissionControl(policy, 100)
    ac.arrive("A", 0.0, 60)
    assert ac.may_run("A", 0.0)
    ac.finish("A", 1.0, 60, tool="a", rebuild_s=5.0)
    ac.arrive("B", 2.0, 50)
    return ac


def lifecycle(be: Any) -> Any:
    """Over a scheduler and load control (on) of one policy: B's pin handed over to b2 (held),
    D pinned, A running r1, C waiting on r3."""
    policy = be.TTLPolicy(PolicyConfig(min_tool_samples=1, min_total_samples=1, admission=True))
    s = be.ProgramScheduler(policy, 100, 10, 4)
    life = be.ProgramLifecycle(s, be.AdmissionControl(policy, 100))
    for rid, pid, t in (("b1", "B", 0.0), ("d1", "D", 0.2)):
        life.arrive(rid, pid, t, 2)
        s.pop(t)
        assert life.finish(
            rid, t + 0.1, 2, tool="bash", cache_miss_cost_s=PINNING_MISS_COST_S
        ).pinned
    life.arrive("r1", "A", 1.0, 1)
    s.pop(1.0)
    assert life.arrive("b2", "B", 1.5, 2) is not None
    life.arrive("r3", "C", 2.0, 1)
    return life


def router(be: Any) -> Any:
    """Two reported instances and a third registered, not reported: P routed to one, which
    pinned it; Q routed too."""
    policy = be.TTLPolicy(PolicyConfig(min_tool_samples=1, min_total_samples=1))
    r = be.ProgramRouter(policy, 4, 8)
    for iid in ("i0", "i1", "i2"):
        r.add_instance(iid)
    r.report("i0", 50, 100, 1, 500, 40, 0.5)
    r.report("i1", 80, 100, 0, 0, 10, 0.9)
    home = r.route("P", 1.0, 10, 640)
    assert r.pinned(home, "P", 9.0, 10)
    r.route("Q", 2.0, 5, 320)
    return r


def linker(be: Any) -> Any:
    """Program 1 recorded a turn (prompt + output) and continues; "job" runs (named)."""
    lk = be.ProgramLinker(max_turn_ends=8, max_age_s=100.0, max_programs=8)
    a = lk.link("t", [1, 2, 3, 4], 1.0)
    assert lk.finished("t", a.program, [1, 2, 3, 4, 5], 2.0, 4)
    assert lk.link("t", [1, 2, 3, 4, 5, 6], 3.0).kind == "continue"
    lk.link("t", [1, 2, 3, 4, 5, 7], 3.0, "job")
    return lk


def tree(be: Any) -> Any:
    t = be.PrefixTree(max_nodes=8, group_depth=2, window=4, max_idle_groups=2, default_ttl_s=9.0)
    t.insert([1, 2, 3], 0.0)
    t.insert([1, 2, 4], 1.0)
    return t


def history(be: Any) -> Any:
    h = be.ToolHistory(16, 4)
    for i in range(5):
        h.observe("a", float(i))
    return h


def miss_model(be: Any) -> Any:
    m = be.CacheMissModel(offload_bandwidth_bytes_per_s=1e9)
    for n in (100, 1000, 4000, 8000):
        m.observe_prefill(n, 1e-3 + n * 1e-5)
    return m


def policy(be: Any) -> Any:
    p = be.TTLPolicy(PolicyConfig(min_tool_samples=1, min_total_samples=1))
    p.observe_tool("a", 3.0)
    p.observe_program(4)
    return p


#: (name, how to build one in a known state): every stateful public class.
OBJECTS: dict[str, Callable[[Any], Any]] = {
    "ToolHistory": history,
    "EtaEstimator": lambda be: be.EtaEstimator(4, 1),
    "OutOfOrderCost": lambda be: be.OutOfOrderCost(4),
    "CacheMissModel": miss_model,
    "TTLPolicy": policy,
    "ProgramScheduler": scheduler,
    "PrefixTree": tree,
    "AdmissionControl": admission,
    "ProgramLifecycle": lifecycle,
    "ProgramRouter": router,
    "ProgramLinker": linker,
}

#: (what, build, method or None for the constructor, valid keyword arguments).
CALLS: list[tuple[str, Callable[[Any], Any] | None, str, dict[str, Any]]] = [
    ("solve_ttl", None, "solve_ttl",
     dict(samples_s=[1.0, 2.0], benefit_s=10.0, cost_per_s=0.1, max_ttl_s=100.0)),
    ("ToolHistory", None, "ToolHistory", dict(window=16, max_tools=4)),
    ("ToolHistory", history, "observe", dict(tool="a", duration_s=1.0)),
    ("ToolHistory", history, "count", dict(tool="a")),
    ("ToolHistory", history, "cdf", dict(tool="a", t_s=1.0)),
    ("ToolHistory", history, "quantile", dict(tool="a", q=0.5)),
    ("ToolHistory", history, "mean", dict(tool="a")),
    ("ToolHistory", history, "samples", dict(tool="a")),
    ("EtaEstimator", None, "EtaEstimator", dict(window=4, min_programs=1, clip=True)),
    ("EtaEstimator", OBJECTS["EtaEstimator"], "observe", dict(total_turns=3)),
    ("OutOfOrderCost", None, "OutOfOrderCost", dict(window=4)),
    ("OutOfOrderCost", OBJECTS["OutOfOrderCost"], "observe", dict(delay_s=1.0)),
    ("CacheMissModel", None, "CacheMissModel",
     dict(prefill_base_s=0.01, prefill_s_per_token=1e-4, prefill_s_per_token2=0.0,
          kv_bytes_per_token=1024, offload_bandwidth_bytes_per_s=1e9, window=8,
          min_samples=3)),
    ("CacheMissModel", miss_model, "observe_prefill", dict(tokens=100, seconds=0.1)),
    ("CacheMissModel", miss_model, "prefill_s", dict(tokens=100)),
    ("CacheMissModel", miss_model, "reload_s", dict(tokens=100)),
    ("CacheMissModel", miss_model, "miss_cost_s", dict(prefix_tokens=100, offloaded_tokens=50)),
    ("TTLPolicy", None, "TTLPolicy", dict(config=PolicyConfig())),
    ("TTLPolicy", policy, "observe_tool", dict(tool="a", duration_s=1.0)),
    ("TTLPolicy", policy, "observe_program", dict(total_turns=3)),
    ("TTLPolicy", policy, "observe_queueing_delay", dict(delay_s=1.0)),
    ("TTLPolicy", policy, "observe_prefill", dict(tokens=100, seconds=0.1)),
    ("TTLPolicy", policy, "tool_count", dict(tool="a")),
    ("TTLPolicy", policy, "miss_cost_s", dict(prefix_tokens=100, offloaded_tokens=0)),
    ("TTLPolicy", policy, "decide",
     dict(tool="a", request_blocks=2, mean_active_blocks=4.0, cache_miss_cost_s=None,
          prefix_tokens=1000, now=1.0, offloaded_tokens=0)),
    # result types a caller builds: their fields converted alike (no size taken on trust)
    ("Pin", None, "Pin", dict(program_id="p", blocks=1, deadline_s=1.0)),
    ("Ended", None, "Ended", dict(program_id="p", turns=1, pin=None, request_ids=["r1"])),
    ("Finished", None, "Finished", dict(decision=None, pin=None, ended=None, released=[])),
    ("GroupStats", None, "GroupStats",
     dict(key=[1, 2], blocks=1, accesses=1, hits=0, reuse_s=[1.0], ttl_s=1.0,
          last_access_s=None)),
    ("Link", None, "Link",
     dict(kind="new", program=1, parent=None, depth_blocks=0, context_blocks=0)),
    ("PinDecision", None, "PinDecision",
     dict(ttl_s=1.0, benefit_s=2.0, cost_per_s=0.5, p_return=0.5, source="tool_cdf")),
    ("ProgramScheduler", scheduler, "arrive",
     dict(request_id="n1", program_id="B", now=5.0, blocks_needed=1)),
    ("ProgramScheduler", scheduler, "arrive_many",
     dict(request_ids=["n1", "n2"], program_ids=["B", "D"], now=5.0, blocks_needed=[1, 2])),
    ("ProgramScheduler", scheduler, "pop", dict(now=5.0)),
    ("ProgramScheduler", scheduler, "pop_many", dict(n=2, now=5.0)),
    ("ProgramScheduler", scheduler, "preempt", dict(request_id="r1", now=5.0)),
    ("ProgramScheduler", scheduler, "finish",
     dict(request_id="r1", now=5.0, blocks_held=1, tool="a", last_turn=False,
          cache_miss_cost_s=PINNING_MISS_COST_S, prefix_tokens=0, offloaded_tokens=0,
          mean_active_blocks=2.0)),
    ("ProgramScheduler", scheduler, "expire", dict(now=5.0)),
    ("ProgramScheduler", scheduler, "reclaim", dict(blocks_needed=1, now=5.0)),
    ("ProgramScheduler", scheduler, "record_queueing_delay", dict(delay_s=1.0)),
    ("ProgramScheduler", scheduler, "end_program", dict(program_id="A")),
    ("ProgramScheduler", scheduler, "abort", dict(request_id="r3")),
    ("ProgramScheduler", scheduler, "pin", dict(program_id="B")),
    ("ProgramScheduler", scheduler, "state", dict(request_id="r1")),
    ("ProgramScheduler", scheduler, "priority", dict(request_id="r3")),
    ("PrefixTree", None, "PrefixTree",
     dict(max_nodes=8, group_depth=2, window=4, max_idle_groups=2, default_ttl_s=9.0)),
    ("PrefixTree", tree, "match_len", dict(hash_ids=[1, 2])),
    ("PrefixTree", tree, "group_ttls",
     dict(benefit_per_hit=1.0, price_per_block_s=0.01, max_ttl_s=60.0)),
    ("PrefixTree", tree, "block_seconds", dict(now=2.0)),
    ("PrefixTree", tree, "insert", dict(hash_ids=[1, 5], now=2.0)),
    ("PrefixTree", tree, "expire", dict(now=2.0)),
    ("PrefixTree", tree, "set_group_ttls", dict(ttls={(1,): 5.0})),
    ("AdmissionControl", admission, "arrive", dict(program_id="A", now=3.0, blocks_needed=10)),
    ("AdmissionControl", admission, "finish",
     dict(program_id="B", now=3.0, blocks_held=50, tool="a", rebuild_s=1.0, last_turn=False)),
    ("AdmissionControl", admission, "end", dict(program_id="B")),
    ("AdmissionControl", admission, "next_use_s", dict(program_id="A", now=3.0)),
    ("AdmissionControl", admission, "working_set_blocks", dict(now=3.0)),
    ("AdmissionControl", admission, "next_shrink_s", dict(now=3.0)),
    ("AdmissionControl", admission, "may_run", dict(program_id="B", now=3.0)),
    ("AdmissionControl", admission, "eviction_order", dict(program_ids=["A", "B"], now=3.0)),
    ("AdmissionControl", admission, "next_order_change_s",
     dict(program_ids=["A", "B"], now=3.0, until_s=9.0)),
    ("AdmissionControl", admission, "admitted", dict(program_id="A")),
    ("ProgramLifecycle", lifecycle, "arrive",
     dict(request_id="n1", program_id="D", now=5.0, blocks_needed=1)),
    ("ProgramLifecycle", lifecycle, "admitted", dict(request_id="b2")),
    ("ProgramLifecycle", lifecycle, "finish",
     dict(request_id="r1", now=5.0, blocks_held=1, tool="a", last_turn=False,
          cache_miss_cost_s=PINNING_MISS_COST_S, prefix_tokens=0, offloaded_tokens=0,
          mean_active_blocks=2.0)),
    ("ProgramLifecycle", lifecycle, "abort", dict(request_id="b2")),
    ("ProgramLifecycle", lifecycle, "end_program", dict(program_id="A")),
    ("ProgramLifecycle", lifecycle, "may_run", dict(program_id="C", now=5.0)),
    ("ProgramLifecycle", lifecycle, "expire", dict(now=5.0)),
    ("ProgramLifecycle", lifecycle, "give_way",
     dict(now=5.0, short_blocks=3, release=lambda program_id, request_id: 2, stalled=True,
          keep="b2", for_program="B")),
    ("ProgramLifecycle", lifecycle, "held", dict(request_id="b2")),
    ("ProgramLifecycle", lifecycle, "may_give_way", dict(nothing_runs=True)),
    ("ProgramRouter", router, "add_instance", dict(instance_id="i3")),
    ("ProgramRouter", router, "report",
     dict(instance_id="i2", free_blocks=1, total_blocks=2, queue_len=3, queued_tokens=4,
          working_set_blocks=5, cached_fraction=0.5)),
    ("ProgramRouter", router, "pinned",
     dict(instance_id="i1", program_id="Q", deadline_s=9.0, blocks=3)),
    ("ProgramRouter", router, "drain", dict(instance_id="i0")),
    ("ProgramRouter", router, "end_program", dict(program_id="P")),
    ("ProgramRouter", router, "route",
     dict(program_id="P", now=3.0, blocks_needed=4, prefix_tokens=100)),
    ("ProgramRouter", router, "home", dict(program_id="P")),
    ("ProgramRouter", router, "routable", dict(instance_id="i2")),
    ("ProgramLinker", None, "ProgramLinker",
     dict(max_turn_ends=8, max_age_s=10.0, max_programs=4, min_depth_fraction=0.5)),
    ("ProgramLinker", linker, "link",
     dict(tenant="t", prompt_hashes=[1, 2, 3, 4, 5, 9], now=4.0, program="job")),
    ("ProgramLinker", linker, "finished",
     dict(tenant="t", program=1, hashes=[1, 2, 3, 4, 5, 6], now=4.0, prompt_blocks=5)),
    ("ProgramLinker", linker, "end_program", dict(tenant="t", program="job")),
    ("ProgramLinker", linker, "running", dict(tenant="t", program=1)),
]  # fmt: skip


def views(obj: Any) -> Any:
    """Everything an object shows without changing, as plain values."""
    out = {}
    for name in sorted(public_members(obj)):
        if name in ("policy", "config", "scheduler", "admission"):
            continue  # the parts an object reads: shown below, by their views
        value = getattr(obj, name)
        if not callable(value):
            out[name] = plain(value)
    name = type(obj).__name__
    if name == "ProgramScheduler":
        out["pins"] = plain(obj.pins())
        out["peek"] = obj.peek()
        out["policy"] = views(obj.policy)
    elif name == "ProgramLifecycle":
        out["scheduler"] = views(obj.scheduler)
        out["admission"] = None if obj.admission is None else views(obj.admission)
    elif name == "ProgramRouter":
        out["homes"] = [obj.home(p) for p in ("P", "Q", "R")]
        out["routable"] = [obj.routable(i) for i in obj.instance_ids]
        out["policy"] = views(obj.policy)
    elif name == "ProgramLinker":
        out["running"] = [obj.running("t", p) for p in (1, 2, "job")]
    elif name == "PrefixTree":
        out["groups"] = plain(obj.groups())
        out["len"] = len(obj)
    elif name == "ToolHistory":
        out["all"] = [(t, obj.samples(t)) for t in [None, *obj.tools()]]
    elif name == "TTLPolicy":
        out["tools"] = [obj.tool_count(t) for t in (None, "a", "bash")]
        out["decision"] = plain(obj.decide(tool="a", request_blocks=2, prefix_tokens=100))
    return out


def public_members(obj: Any) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def target(be: Any, build: Callable[[Any], Any] | None, method: str) -> tuple[Any, Any]:
    """(the object, or None for a constructor or function; the callable)."""
    if build is None:
        return None, getattr(be, method)
    obj = build(be)
    return obj, getattr(obj, method)


# -- names, members, signatures -----------------------------------------------------------------


def test_both_backends_serve_every_public_name_and_nothing_else(backends):
    ref, nat = backends
    for name in PUBLIC:
        assert getattr(ref, name) is not None and getattr(nat, name) is not None
    from ttlpolicy import _native

    public_native = {n for n in NATIVE_ONLY if not n.startswith("_")}
    assert {n for n in dir(_native) if not n.startswith("_")} == set(PUBLIC) | public_native
    # the core's name tables agree with the reference's
    assert list(_native.SOURCES) == list(ttlpolicy.reference.policy.SOURCES)
    assert list(_native.POLICY_CONFIG_DEFAULTS) == list(PolicyConfig.model_fields)


@pytest.mark.parametrize(
    ("table", "python"),
    [
        ("POLICY_CONFIG_DEFAULTS", PolicyConfig()),
        ("POLICY_CONFIG_PUBLISHED", PolicyConfig.published()),
    ],
    ids=["defaults", "published"],
)
def test_config_values_are_the_cores_field_by_field(backends, table, python):
    """``config.py`` and ``rust/src/config.rs`` each write the defaults and ``published()``
    (the reference backend runs without the native module): every field, value and type,
    must be the same in both."""
    from ttlpolicy import _native

    core = getattr(_native, table)
    assert list(core) == list(PolicyConfig.model_fields), table
    for field, value in python.model_dump().items():
        assert type(core[field]) is type(value) and core[field] == value, (
            f"{table}[{field!r}]: core {core[field]!r}, config.py {value!r}"
        )


def test_every_public_name_is_covered_here():
    covered = {what for what, *_ in CALLS} | {"Pin", "Ended", "Finished", "GroupStats", "Link"}
    assert covered == set(PUBLIC)


def _instances(be: Any) -> dict[str, Any]:
    out = {name: build(be) for name, build in OBJECTS.items()}
    results = _results(be)
    out.update({type(r).__name__: r for r in results})
    return out


@pytest.mark.parametrize("name", sorted(set(PUBLIC) - {"solve_ttl"}))
def test_same_members_and_signatures(backends, name):
    ref, nat = (_instances(be)[name] for be in backends)
    assert public_members(ref) == public_members(nat), name
    for member in sorted(public_members(ref)):
        r, n = getattr(ref, member), getattr(nat, member)
        assert callable(r) == callable(n), f"{name}.{member}"
        if callable(r) and not isinstance(r, type):
            assert_same_signature(r, n, f"{name}.{member}")


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_public_data_members_refuse_assignment(impl, name):
    """Every public member that is not a method is read-only, on either backend: the native
    getters have no setter, and a reference property none either (a writable attribute there
    would let a caller change what only the native side refuses).  A new public name is not
    tried: the native classes refuse one, the reference's (no ``__slots__``) take it."""
    obj = OBJECTS[name](impl)
    for member in sorted(public_members(obj)):
        value = getattr(obj, member)
        if callable(value):
            continue
        try:
            setattr(obj, member, value)
        except AttributeError:  # (dataclasses.FrozenInstanceError is one)
            continue
        pytest.fail(f"{impl.name}: {name}.{member} takes an assignment")


@pytest.mark.parametrize("name", PUBLIC)
def test_same_constructor_and_function_signatures(backends, name):
    ref, nat = (getattr(be, name) for be in backends)
    assert_same_signature(ref, nat, name)


def assert_same_signature(ref: Any, nat: Any, what: str) -> None:
    rs, ns = inspect.signature(ref), inspect.signature(nat)
    assert list(rs.parameters) == list(ns.parameters), what
    for (p, r), n in zip(rs.parameters.items(), ns.parameters.values(), strict=True):
        # the native side takes every argument by position or keyword, as the reference does
        assert r.kind == n.kind, f"{what}({p})"
        assert (r.default is r.empty) == (n.default is n.empty), f"{what}({p}) default"
        if n.default is not Ellipsis and n.default is not n.empty:
            assert close(r.default, n.default), f"{what}({p}) default"


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_defaults_give_the_same_objects(backends, name):
    ref, nat = backends
    if name == "ProgramScheduler":
        built = [be.ProgramScheduler(be.TTLPolicy(), 10, 1) for be in backends]
    elif name == "AdmissionControl":
        built = [be.AdmissionControl(be.TTLPolicy(), 10) for be in backends]
    elif name == "ProgramLifecycle":
        built = [be.ProgramLifecycle(be.ProgramScheduler(be.TTLPolicy(), 10, 1)) for be in backends]
    elif name == "ProgramRouter":
        built = [be.ProgramRouter(be.TTLPolicy()) for be in backends]
    else:
        built = [getattr(be, name)() for be in (ref, nat)]
    assert_same(views(built[0]), views(built[1]), name)


def test_defaulted_call_arguments_give_the_same_results(backends):
    ref, nat = (policy(be) for be in backends)
    assert_same(plain(ref.decide()), plain(nat.decide()), "decide()")
    assert_same(ref.miss_cost_s(1000), nat.miss_cost_s(1000), "miss_cost_s(1000)")
    s = [scheduler(be) for be in backends]
    done = [x.finish("r1", 3.0, 1) for x in s]
    assert_same(plain(done[0]), plain(done[1]), "finish(r1, 3.0, 1)")


# -- result types ---------------------------------------------------------------------------------


def _results(be: Any) -> list[Any]:
    """One of each result type, and variants of them, built by the same calls."""
    s = scheduler(be)
    finished = s.finish("r1", 3.0, 1, tool="a", cache_miss_cost_s=PINNING_MISS_COST_S)
    s.arrive("r4", "C", 3.5, 1)
    ended = s.abort("r3")
    s.arrive("r5", "D", 4.0, 1)
    s.pop(4.0)
    last = s.finish("r5", 4.5, 3, last_turn=True)
    t = tree(be)
    return [
        finished.decision,
        finished.pin,
        finished,
        ended,
        last,
        last.ended,
        *t.groups(),
        *s.pins(),
        linker(be).link("t", [1, 2, 3, 4, 5, 6, 8], 5.0),
        be.Link("fork", 2**40, "job", 0, 3),
        be.PinDecision(0.0, 0.0, 1.0, 0.0, "no_benefit"),
        be.Pin("é'\"", 2**40, -0.0),
        be.GroupStats((1,), 0, 0, 0, (), math.inf, None),
    ]


def test_result_types_compare_hash_pickle_and_print_alike(backends):
    ref_results, nat_results = (_results(be) for be in backends)
    again = _results(backends[1])
    for r, n, n2 in zip(ref_results, nat_results, again, strict=True):
        what = repr(r)
        assert type(r).__name__ == type(n).__name__
        assert repr(r) == repr(n), what
        assert_same(plain(r), plain(n), what)
        assert hash(r) == hash(n), what
        # by value: the same result built twice is equal, and hashes alike
        assert n == n2 and hash(n) == hash(n2) and n is not n2, what
        for x in (r, n):
            copy = pickle.loads(pickle.dumps(x))
            assert type(copy) is type(x) and copy == x and hash(copy) == hash(x), what
            fields = [getattr(x, f) for f in inspect.signature(type(x)).parameters]
            assert type(x)(*fields) == x, what
            # matched by position, as a dataclass is (``case Pin(program_id, blocks, _)``)
            assert type(x).__match_args__ == tuple(inspect.signature(type(x)).parameters), what
    # different values differ, and nothing equals a plain tuple
    for results in (ref_results, nat_results):
        assert results[1] != results[-2]  # two pins
        assert results[0] != results[-3]  # two decisions
        assert all(x != plain(x) for x in results)


# -- bad arguments: same exception type and message, nothing changed -------------------------------

CASES = [
    pytest.param(i, field, id=f"{what}.{method}({field})")
    for i, (what, _build, method, kwargs) in enumerate(CALLS)
    for field in kwargs
]


@pytest.mark.parametrize(("i", "field"), CASES)
def test_every_bad_argument_is_refused_alike(backends, i, field):
    _what, build, method, kwargs = CALLS[i]
    for bad in [*BAD, *_related(kwargs[field])]:
        args = {**kwargs, field: bad}
        outcomes, before, after = [], [], []
        for be in backends:
            obj, fn = target(be, build, method)
            before.append(views(obj) if obj is not None else None)
            kind, result = outcome(partial(fn, **args))
            if kind == "ok" and type(result).__name__ in OBJECTS:
                result = views(result)  # a constructor: compare what was built
            outcomes.append((kind, result))
            after.append(views(obj) if obj is not None else None)
        what = f"{method}({field}={bad!r:.60})"
        assert_same(outcomes[0], outcomes[1], what)
        if outcomes[0][0] == "raised":
            assert before == after or close(before, after), f"{what} changed the state"
        assert_same(after[0], after[1], f"state after {what}")


def _related(value: Any) -> list[Any]:
    """Bad values shaped like the valid one: its type's extremes, and for a sequence the same
    sequence with each kind of bad element."""
    if isinstance(value, list):
        return [[*value, bad] for bad in ("x", None, 1.5, 2**63, -(2**70), NAN, Opaque())]
    if isinstance(value, dict):
        return [{k: bad for k in value} for bad in (-1.0, NAN, None, "1")]
    return []
