"""The simulator's engine allocates a prompt chunk by chunk, as vLLM v1 does (vLLM 0.32.0):
``Scheduler.schedule`` schedules the running requests first, in order, and
``KVCacheManager.allocate_slots`` gives each the blocks of the tokens scheduled in that
step only; a waiting request is admitted when its whole prompt fits
(``scheduler_reserve_full_isl``, on by default: ``allocate_slots(full_sequence_must_fit=...)``)
but gets its cached prefix and its first chunk alone.  When a running request's blocks do not
fit, the scheduler preempts the last running request — possibly the request itself — and
retries (``self.running.pop()`` in ``schedule``), and a step that preempted admits nothing
(``if not preempted_reqs``).  Scenarios small enough to count by hand; the expected figures
are derived from those rules, and the whole-prompt allocation the simulator had before gives
different ones (said beside each)."""

from __future__ import annotations

from collections.abc import Callable

from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.vllm import VLLM

BLOCK = 16


class ReturnedLast(VLLM):
    """Stock vLLM, with an eviction order that changes when a program returns: free chains
    in LRU order, but those of programs with a call waiting go last (as the TTL adapter's
    next-use order puts a program that is back).  A sort by a key of each program's own."""

    name = "vllm-returned-last"

    def __init__(self) -> None:
        super().__init__()
        self.back: set[str] = set()

    def arrive(self, call: Call, now: float) -> bool:
        self.back.add(call.program_id)
        return super().arrive(call, now)

    def pop(self) -> Call:
        call = super().pop()
        self.back.discard(call.program_id)
        return call

    def eviction_order(self) -> Callable[[list[str]], list[str]]:
        return lambda programs: sorted(programs, key=lambda p: p in self.back)


def test_a_later_chunk_evicts_what_the_order_is_when_it_is_scheduled() -> None:
    # 72 blocks of 16 tokens, a token budget of 32 (two blocks a step).  P (4 blocks) and Q
    # (4 blocks) leave their chains in the free queue, P's older.  X arrives at 1.0 s with
    # 68 blocks of prompt: it fits (64 free + 8 cached), and is prefilled in 34 chunks of 2
    # blocks, the budget being full.  P's second call is issued ~2 steps after 1.0 s and
    # waits (no budget left): from then on P's chain goes last.  Chunks 1-32 take the 64
    # free blocks; chunks 33 and 34 each evict 2 blocks, in the order of that moment: Q's.
    # P is admitted after X and hits its whole chain (64 tokens); Q's chain is gone.
    # (Allocating X's prompt at admission evicts 4 blocks at 1.0 s, when P was first in the
    # order: P hits nothing, Q keeps its chain.)
    p = Program("P", (Turn(64, 1, 0, 0.0, "bash"), Turn(80, 1, 4, 1.0, None)))
    q = Program("Q", (Turn(64, 1, 0, 0.0, None),))
    x = Program("X", (Turn(68 * BLOCK, 1, 0, 0.0, None),))
    engine = Engine(hw_blocks(72), ReturnedLast(), EngineConfig(BLOCK, 32, 8))
    engine.add_programs([(0.0, p), (0.5, q), (1.0, x)])
    m = engine.run()
    engine.kv.check()
    assert m.hit_tokens == 4 * BLOCK
    assert engine.kv.chain_blocks("Q") == 0
    assert m.preemptions == 0


def test_a_later_chunk_that_does_not_fit_preempts_the_last_running_call() -> None:
    # 20 blocks of 16 tokens, a token budget of 65.  A (160 tokens, 10 blocks, 40 out) and X
    # (160 tokens, 10 blocks) arrive at 0 s, A first.  A is prefilled in chunks of 65, 65
    # and 30 tokens (5, 9, 10 blocks); X waits until step 3, which leaves 35 tokens of budget
    # after A's last chunk: X's whole prompt fits (10 of the 10 blocks A leaves), so it is
    # admitted with its first chunk, 35 tokens (3 blocks).  Step 4: A decodes its first
    # token into an 11th block, X's chunk is 64 tokens (99 computed: 7 blocks), 18 held.
    # Step 5: X's last 61 tokens need 3 more blocks, 2 are free: the last running call is
    # preempted — X itself — with 99 tokens computed, 6 full blocks cached.  A runs on; its
    # growth (to 13 blocks) fits in the 3 uncached free blocks, so X's 6 stay cached and X,
    # readmitted when A ends, hits 96 tokens and recomputes 64.
    # (Allocating X's prompt at admission holds all 20 blocks: A's first decode block does not
    # fit in step 4 and X is preempted with 35 tokens computed, 2 blocks cached: it
    # recomputes 128.)
    a = Program("A", (Turn(160, 40, 0, 0.0, None),))
    x = Program("X", (Turn(160, 1, 0, 0.0, None),))
    engine = Engine(hw_blocks(20), make_policy("vllm"), EngineConfig(BLOCK, 65, 8))
    engine.add_programs([(0.0, a), (0.0, x)])
    m = engine.run()
    engine.kv.check()
    assert m.preemptions == 1
    assert m.recomputed_tokens == 160 - 6 * BLOCK
    assert m.hit_tokens == 0  # (a preempted call's hit counts as recomputation avoided)
    assert m.prefill_tokens == 160 + 99 + 64


class OrderFlipsAt(VLLM):
    """Stock vLLM with an eviction order that reads the clock, as the TTL policy's next-use
    order does (a program away longer than its tool ever took stops being expected back):
    P's chain goes first before ``flip_s``, Q's from then on.  No event marks the flip."""

    name = "vllm-order-flips"

    def __init__(self, flip_s: float) -> None:
        super().__init__()
        self.flip_s = flip_s

    def eviction_order(self) -> Callable[[list[str]], list[str]]:
        def first() -> str:
            assert self.view is not None  # (bound before the run)
            return "P" if self.view.now < self.flip_s else "Q"

        return lambda programs: sorted(programs, key=lambda p: p != first())


def flip_scenario(policy: VLLM) -> Engine:
    # 72 blocks of 16 tokens, a budget of 32 (two blocks a step).  P and Q (one call each)
    # leave 4-block chains in the free queue; X arrives at 1.0 s with 68 blocks of prompt,
    # prefilled in 34 full-budget chunks with no event between them: the engine may jump
    # over them as one run.  Chunks 1-32 take the 64 free blocks; chunks 33 and 34 evict
    # 2 blocks each, in the order of the instant each is scheduled (its step's start).
    p = Program("P", (Turn(64, 1, 0, 0.0, None),))
    q = Program("Q", (Turn(64, 1, 0, 0.0, None),))
    x = Program("X", (Turn(68 * BLOCK, 1, 0, 0.0, None),))
    engine = Engine(hw_blocks(72), policy, EngineConfig(BLOCK, 32, 8))
    engine.add_programs([(0.0, p), (0.5, q), (1.0, x)])
    engine.run()
    engine.kv.check()
    return engine


def test_a_clock_read_eviction_order_is_read_when_the_evicting_step_is_scheduled() -> None:
    # X's prefill ends (its one token sampled) at the same instant whichever chain goes: X
    # hits nothing.  Flip the order just before that instant, after chunk 34 was scheduled:
    # both evicting chunks were scheduled while P came first, so P's chain goes and Q's
    # stays.  (Allocating a run's later chunks when the run ends reads the order after the
    # flip: Q's chain went and P's stayed.)
    end_s = flip_scenario(VLLM()).metrics.makespan_s
    engine = flip_scenario(OrderFlipsAt(end_s - 1e-9))
    assert engine.metrics.makespan_s == end_s
    assert engine.kv.chain_blocks("P") == 0
    assert engine.kv.chain_blocks("Q") == 4
