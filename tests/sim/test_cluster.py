"""The cluster simulation (``sim/cluster.py``): one instance behind any router is the lone
engine to the bit; session-hash keeps a program on one instance; the ttlpolicy router never
sends a returning call away from its live pin when the wait there is zero; a killed
instance's programs finish elsewhere and nothing goes to it after; the instances report the
queue a return waits behind apart from the whole, and a home that lost a program's context
says so (it routes as new); every policy runs under every router; bad arguments are refused
by name."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import ttlpolicy
from sim_hardware import hw_blocks
from ttlpolicy.sim import POLICY_NAMES, programs_from_records, simulate
from ttlpolicy.sim.call import ProgramRun
from ttlpolicy.sim.cluster import ROUTERS, Cluster, SessionHash, TTLPolicyRouter
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin
from ttlpolicy.sim.run import simulate_cluster
from ttlpolicy.sim.workload import poisson_arrivals
from ttlpolicy.traces import read_trace

SESSIONS = Path(ttlpolicy.__file__).parent / "data" / "sessions"
PROGRAMS = programs_from_records(
    read_trace(SESSIONS), max_context=120_000, context_mode="truncate", think_cap_s=300.0
)
CALLS = sum(len(p.turns) for p in PROGRAMS)
#: the same programs with short tool calls: most return within their pin
QUICK = programs_from_records(
    read_trace(SESSIONS), max_context=120_000, context_mode="truncate", think_cap_s=300.0,
    think_scale=0.02,
)  # fmt: skip
#: a small KV cache (about three of the longest contexts): pins, evictions and queues
SMALL = hw_blocks(24_000, cpu_blocks=24_000)


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("policy", ["vllm", "ttlpolicy", "continuum", "ttlpolicy-offload"])
@pytest.mark.parametrize("load", [{"rate_per_s": 0.5}, {"concurrency": 16}])
def test_one_instance_is_the_lone_engine(router, policy, load):
    lone = simulate(SMALL, policy, PROGRAMS, **load)
    one = simulate(SMALL, policy, PROGRAMS, instances=1, router=router, **load)
    assert lone.calls_done == CALLS
    assert one == lone  # every field, floats exactly


class Recording(SessionHash):
    def __init__(self) -> None:
        self.placed: dict[str, set[int]] = defaultdict(set)

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        i = super().choose(run, turn_index, now)
        self.placed[run.program.program_id].add(i)
        return i


def test_session_hash_keeps_a_program_on_one_instance():
    router = Recording()
    m, _ = simulate_cluster(
        SMALL, "ttlpolicy", PROGRAMS, instances=4, router=router, rate_per_s=1.0
    )
    assert m.calls_done == CALLS
    assert all(len(where) == 1 for where in router.placed.values())
    assert len({i for where in router.placed.values() for i in where}) > 1  # it spreads them


class PinWatch(TTLPolicyRouter):
    """Counts returning calls whose home holds their live pin with no wait there (its queue
    empty, the call fitting), and where each went."""

    def bind(self, cluster: Cluster) -> None:
        super().bind(cluster)
        self.kept = 0
        self.away = 0

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        pid = run.program.program_id
        home = self.router.home(pid)
        zero_wait = False
        if home is not None:
            e = self.cluster.engines[int(home)]
            assert isinstance(e.policy, TTLPolicyPlugin)
            pin = e.policy.sched.pin(pid)
            b = self.cluster.config.block_tokens
            need = max(
                0, -(-run.program.turns[turn_index].input_tokens // b) - (pin.blocks if pin else 0)
            )
            working = (
                e.policy.admission.working_set_blocks(now) if e.policy.admission else e.kv.used
            )
            zero_wait = (
                pin is not None and now < pin.deadline_s and e.policy.waiting() == 0
                and need <= e.kv.available() and working + need <= e.kv.capacity
            )  # fmt: skip
        i = super().choose(run, turn_index, now)
        if zero_wait:
            self.kept += i == int(home)
            self.away += i != int(home)
        return i


def test_the_ttlpolicy_router_never_leaves_a_live_pin_with_no_wait():
    router = PinWatch()
    m, _ = simulate_cluster(SMALL, "ttlpolicy", QUICK, instances=3, router=router,
                            rate_per_s=1.0)  # fmt: skip
    assert m.calls_done == CALLS
    assert router.kept > 50  # the case arose
    assert router.away == 0


class ReportWatch(TTLPolicyRouter):
    """Checks each instance's report against the engines' own state before each choice, and
    that a home whose cache lost a program's context tells the router before its call."""

    def bind(self, cluster: Cluster) -> None:
        super().bind(cluster)
        self.mixed = self.lost = 0
        self.evictions: list[tuple[str, str, int]] = []
        inner, told = self.router, self.evictions

        class Tell:  # the library's router, its evictions recorded
            def __getattr__(self, name: str) -> object:
                return getattr(inner, name)

            def evicted(self, iid: str, pid: str, held: int) -> bool:
                told.append((iid, pid, held))
                return inner.evicted(iid, pid, held)

        self.router = Tell()

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        c = self.cluster
        pid = run.program.program_id
        last = c.last_instance(pid)
        held = None if last is None else c.engines[last].kv.chain_blocks(pid)
        lost = held is not None and held < run.program.turns[turn_index].reusable_blocks
        for i, (queue, tokens, returns, return_tokens) in enumerate(c.waiting()):
            e = c.engines[i]
            # the scheduler's waiting calls are placed there and not running (calls on
            # their way to it count too)
            assert queue >= e.policy.waiting()
            assert 0 <= returns <= queue and 0 <= return_tokens <= tokens
            self.mixed += 0 < returns < queue
        told = len(self.evictions)
        i = super().choose(run, turn_index, now)
        assert self.evictions[told:] == ([(str(last), pid, held)] if lost else [])
        self.lost += lost
        return i


def test_instances_report_their_return_queue_and_lost_contexts():
    router = ReportWatch()
    # a smaller cache still (about one long context per instance), every program at once
    m, _ = simulate_cluster(hw_blocks(8_000, cpu_blocks=0), "ttlpolicy", PROGRAMS, instances=2,
                            router=router, concurrency=16)  # fmt: skip
    assert m.programs_done == len(PROGRAMS)
    assert router.mixed > 0  # queues held returns and new programs' calls together
    assert router.lost > 0  # homes lost contexts


class Watch(TTLPolicyRouter):
    def bind(self, cluster: Cluster) -> None:
        super().bind(cluster)
        self.placed: list[tuple[float, int]] = []

    def choose(self, run: ProgramRun, turn_index: int, now: float) -> int:
        i = super().choose(run, turn_index, now)
        self.placed.append((now, i))
        return i


@pytest.mark.parametrize("router", ["ttlpolicy", "session-hash", "round-robin"])
def test_a_killed_instance_s_programs_finish_elsewhere(router):
    watch = Watch() if router == "ttlpolicy" else router
    kill_s = 400.0
    m, per_instance = simulate_cluster(
        SMALL, "ttlpolicy", PROGRAMS, instances=3, router=watch, rate_per_s=1.0,
        kill=(0, kill_s),
    )  # fmt: skip
    assert m.programs_done == len(PROGRAMS)
    assert per_instance[0]["killed"] == 1.0
    assert per_instance[0]["calls"] > 0  # it served before it died
    # the calls it lost ran again: at least every turn finished once
    assert m.calls_done >= CALLS
    if isinstance(watch, Watch):
        assert all(i != 0 for t, i in watch.placed if t >= kill_s)


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("policy", [p.replace("<s>", "5") for p in POLICY_NAMES if p != "alone"])
def test_every_policy_runs_under_every_router(router, policy):
    m, per_instance = simulate_cluster(
        SMALL, policy, PROGRAMS[:8], instances=2, router=router, rate_per_s=1.0
    )
    assert m.programs_done == 8
    assert sum(x["calls"] for x in per_instance) == m.calls_done


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="instances"):
        Cluster(SMALL, "vllm", 0, "round-robin")
    with pytest.raises(ValueError, match="router must be one of"):
        Cluster(SMALL, "vllm", 2, "nearest")
    with pytest.raises(ValueError, match="alone"):
        Cluster(SMALL, "alone", 2, "round-robin")
    with pytest.raises(TypeError, match="policy name or factory"):
        Cluster(SMALL, TTLPolicyPlugin(), 2, "round-robin")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="instance must be in"):
        Cluster(SMALL, "vllm", 2, "round-robin").kill(2, 1.0)


def test_a_program_that_moves_leaves_nothing_expecting_it_behind():
    """Round-robin moves every program at every call: each instance it left ends it there
    (load control and the pin table), so no working set counts a program that left, and no
    instance waits on one (it would stall: load control and the queue's order disagreeing)."""
    cluster = Cluster(SMALL, "ttlpolicy", 3, "round-robin")
    cluster.add_programs(poisson_arrivals(QUICK, 1.0, 0))
    m = cluster.run()
    assert m.programs_done == len(QUICK)
    for e in cluster.engines:
        assert isinstance(e.policy, TTLPolicyPlugin) and e.policy.admission is not None
        assert e.policy.admission.program_count == 0
        assert e.policy.sched.pin_count == 0 and e.kv.pinned == 0
