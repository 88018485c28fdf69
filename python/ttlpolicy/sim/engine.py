"""A discrete-event model of one LLM engine instance serving agent programs.

Continuous batching as vLLM v1 does it: each step, running calls decode one token each and
the rest of a per-step token budget goes to prefill chunks, in admission order; waiting calls
are admitted (by the policy's order) while a sequence slot, budget and memory are free.
Memory is allocated as vLLM's ``KVCacheManager.allocate_slots`` does, per step for the tokens
scheduled in it: a call is admitted when its whole prompt fits (vLLM's
``scheduler_reserve_full_isl``), but takes only its cached prefix and its first chunk; each
later chunk, and each block decoding grows into, is allocated when its step is scheduled —
the running calls' first, then admissions (vLLM's ``Scheduler.schedule``), so a later chunk
evicts what the free queue's order is then, and may not fit.  When a step's blocks do not
fit, pins are reclaimed (the policy chooses), then the most recently admitted call is
preempted (possibly the one short of memory) and later recomputed, and that step admits
nothing.  A policy may instead release pins before each step (``give_way``, as the vLLM
adapter does).  At a step boundary the calls issued during the step arrive before pins due
expire (vLLM adds requests before it schedules).

The engine jumps over runs of identical steps — a decode-only batch, or one long prefill
chunked at the full budget — summing their step times in closed form (their blocks past the
first step's allocated at the end of the run; under a policy's eviction order, which reads
the clock, a run ends before a step that evicts unless the order stays the same till its
end), and stops a jump at the next event (a call issued, a pin deadline, a reload done, a
call finishing, memory running short).  Results are deterministic for a given workload,
policy and seed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import cast

from .call import Call, ProgramRun
from .hardware import Hardware, RunTimes, native_steps
from .interface import EngineConfig, Policy, PolicyHooks, StepPlan, Verdict
from .metrics import Metrics
from .pin_ledger import PinLedgerKV
from .workload import ConcurrencyArrivals, Program


class _View:
    """The engine as a policy sees it (``interface.EngineView``)."""

    def __init__(self, engine: Engine) -> None:
        self._e = engine
        self.hardware = engine.hw
        self.config = engine.config
        # prefill_s by token count: a pure function of the (frozen) hardware and budget, asked
        # at every finished call by the policies that weigh a miss cost
        self._prefill_s: dict[int, float] = {}
        # prefill_s of whole chunks by their count: the hardware sums a prefill chunk by chunk,
        # the full ones first, so a prefill is the sum of its full chunks plus its last chunk
        # alone (from where the full ones end) — the same floats added in the same order
        self._full_chunks_s: dict[int, float] = {}

    # the engine's clock, read without a Python frame (policies read it at every peek, pop
    # and eviction order)
    now = property(attrgetter("_e.now"), doc="The engine's clock, seconds.")

    def running_blocks(self) -> int:
        return sum(c.blocks for c in self._e.running)

    def free_blocks_for(self, program: str | None) -> int:
        kv = self._e.kv
        return kv.available() if program is None else kv.available_for(program)

    @property
    def running_count(self) -> int:
        return len(self._e.running)

    @property
    def cpu_tier(self) -> bool:
        """The engine keeps evicted blocks reloadable in a CPU tier."""
        return self._e.kv.cpu_capacity > 0

    @property
    def unused_blocks(self) -> int:
        """Blocks neither allocated nor holding a cached chain (taking them evicts nothing)."""
        return self._e.kv.free_blocks

    def cached_chains(self) -> dict[str, int]:
        """The free (evictable) cached chains: program → GPU blocks."""
        return self._e.kv.free_chains()

    def prefill_s(self, tokens: int) -> float:
        s = self._prefill_s.get(tokens)
        if s is None:
            hw, budget = self.hardware, self.config.token_budget
            chunks, rest = divmod(tokens, budget)
            full_s = self._full_chunks_s.get(chunks)
            if full_s is None:
                full_s = self._full_chunks_s[chunks] = hw.prefill_s(chunks * budget, budget)
            s = full_s + hw.prefill_s(rest, budget, chunks * budget)
            self._prefill_s[tokens] = s
        return s


_PROGRAM, _ISSUE, _READY = 0, 1, 2
_NO_LIMIT = 1 << 62  # steps of a run before any call limits it


class Engine:
    #: Time a single step with ``StepModel.step_s`` (the float ``StepRun.s(1)`` gives) rather
    #: than through a ``StepRun``; off, the plain path, which a test compares it with.
    one_step_shortcut = True
    #: Set by a cluster (``cluster.py``), whose router places each call: it takes the
    #: program's next call, ``forward(issue_s, run, turn_index)``, instead of this engine's
    #: queue, and hears ``forward(now, run, None)`` when the program ends here.
    forward: Callable[[float, ProgramRun, int | None], None] | None = None
    #: Set by a cluster: its next event (a call it has yet to place), where a run of
    #: identical steps stops as at one of this engine's own events.
    horizon_s: float | None = None

    def __init__(
        self,
        hw: Hardware,
        policy: Policy,
        config: EngineConfig | None = None,
        *,
        cpu_tier: bool | None = None,
    ) -> None:
        self.hw = hw
        # the step-time model, native when the Rust core is loaded (the same floats)
        self._steps = native_steps(hw.steps)
        self.policy = policy
        self.config = config or EngineConfig()
        b = self.config.block_tokens
        use_cpu = policy.uses_cpu_tier if cpu_tier is None else cpu_tier
        self.kv = PinLedgerKV(
            hw.kv_capacity_blocks(b), hw.cpu_capacity_blocks(b) if use_cpu else 0, self._clock
        )
        self.now = 0.0
        self.running: list[Call] = []
        self.metrics = Metrics()
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        self._ids = itertools.count()
        self._admits = itertools.count()
        self._arrivals: ConcurrencyArrivals | None = None
        self._ready_max_s = 0.0  # the latest ready_s of any admitted call (reloads end then)
        self.peak_used_blocks = 0
        policy.bind(_View(self))
        # The policy's optional hooks (``interface.PolicyHooks``): its eviction order of free
        # cached chains, and when that order changes (without an order, LRU); ``stepped``
        # after each step that prefilled, skipped when the policy leaves it a no-op.
        self.kv.eviction_order = policy.eviction_order()
        self._order_change_s = policy.eviction_order_change_s
        stepped = policy.stepped
        noop = getattr(stepped, "__func__", None) is PolicyHooks.stepped
        self._stepped = None if noop else stepped

    def _clock(self) -> float:
        return self.now

    # -- workload -------------------------------------------------------------------------
    def _push(self, t: float, kind: int, obj: object) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, obj))

    def add_programs(self, arrivals: Iterable[tuple[float, Program]]) -> None:
        for t, prog in arrivals:
            self._push(t, _PROGRAM, prog)

    def use_concurrency(self, arrivals: ConcurrencyArrivals) -> None:
        self._arrivals = arrivals
        for prog in arrivals.initial():
            self._push(0.0, _PROGRAM, prog)

    def deliver(self, t: float, run: ProgramRun, turn_index: int, starts: bool) -> None:
        """A cluster's router placed the call here, issued at ``t``; ``starts``: it starts
        the program here (its ``arrival_s`` becomes the instant it is handled)."""
        if starts:
            self._push(t, _PROGRAM, run)
        else:
            self._push(t, _ISSUE, (run, turn_index))

    # -- the loop -------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None) -> Metrics:
        prepare, step = self._prepare, self._step
        while True:
            plan = prepare()
            if plan is None:
                t = self._next_event_s()
                if t is None:
                    break
                self._advance(max(t, self.now) - self.now)
                continue
            step(plan)
            if progress is not None:
                progress(self.metrics.programs_done)
        return self.finish_run()

    def _prepare(self) -> StepPlan | None:
        """Events due, then the next step planned (its first step's blocks allocated) and
        waiting calls admitted; None: nothing can compute before the next event."""
        handle_events, admit = self._handle_events, self._admit
        plan_step, plan_again = self._plan, self._schedule_again
        running, policy, max_seqs = self.running, self.policy, self.config.max_seqs
        gives_way = policy.reclaims_ahead
        unpin = self.kv.unpin
        metrics = self.metrics
        while True:
            handle_events()
            now = self.now
            active = running if self._ready_max_s <= now else self._active(now)
            if gives_way and self.kv.pinned and policy.waiting():
                policy.give_way(self._step_blocks(active), now, unpin)
            # As vLLM's Scheduler.schedule: the running calls take their step's blocks first;
            # a step that preempted admits nothing (else a just-preempted call could be
            # readmitted and preempted forever).
            plan = None
            preemptions = metrics.preemptions
            if active:  # (None from _plan: memory was freed, pins reclaimed or a preemption)
                plan = plan_step(active) or plan_again()
            if (
                metrics.preemptions == preemptions
                and len(running) < max_seqs
                and policy.waiting()  # (else peek would say None)
            ):
                n_running = len(running)
                admit()
                if len(running) != n_running:  # the step's shape changed: plan it again
                    active = self._active(now)
                    plan = (plan_step(active) or plan_again()) if active else None
            if plan is None and metrics.preemptions != preemptions:
                continue  # every call that could compute was preempted: admit again
            return plan

    def finish_run(self) -> Metrics:
        """The run's metrics, once no event is left (a stalled engine is an error)."""
        if self.running or self.policy.waiting():
            raise RuntimeError(
                f"simulation stalled with {len(self.running)} running and "
                f"{self.policy.waiting()} waiting calls"
            )
        self.metrics.makespan_s = self.now
        self.kv.close_all()
        self.metrics.pinned_in_vain_block_s = self.kv.in_vain_block_s
        self.metrics.in_vain_by_program = dict(self.kv.in_vain_by_program)
        self.metrics.evicted_blocks = self.kv.evicted_blocks
        self.metrics.offloaded_blocks = self.kv.offloaded_blocks
        return self.metrics

    def _schedule_again(self) -> StepPlan | None:
        """After a plan that freed memory instead (``_plan`` returned None): the running calls
        that may compute now, planned again until a plan holds; None when none is left."""
        while True:
            active = self._active(self.now)
            if not active:
                return None
            plan = self._plan(active)
            if plan is not None:
                return plan

    def _step_blocks(self, active: list[Call]) -> int:
        """Blocks the next step allocates for the running calls, as vLLM schedules them: in
        admission order, each its next prompt chunk (or its one decode token) within the token
        budget, past the blocks it holds."""
        b = self.config.block_tokens
        budget = self.config.token_budget
        need = 0
        for c in active:
            if budget <= 0:
                break
            if c.computed >= c.prompt:  # decoding: after it, the KV of all but its new token
                budget -= 1
                held = c.prompt + c.generated
            else:
                n = c.prompt - c.computed
                if n > budget:
                    n = budget
                budget -= n
                held = c.computed + n
            want = -(-held // b)
            if want > c.blocks:
                need += want - c.blocks
        return need

    def _active(self, now: float) -> list[Call]:
        """The running calls that may compute now (not waiting for a reload from the CPU):
        the batch itself when every reload is done (a step reads it before changing it)."""
        if self._ready_max_s <= now:  # every reload is done
            return self.running
        return [c for c in self.running if c.ready_s <= now]

    def _next_event_s(self) -> float | None:
        t = self._events[0][0] if self._events else None
        d = self.policy.next_deadline()
        if d is not None and (t is None or d < t):
            return d
        return t

    def _run_bound_s(self) -> float | None:
        """Where a run of identical steps stops: the next event, a cluster's included."""
        t = self._next_event_s()
        h = self.horizon_s
        if h is not None and (t is None or h < t):
            return h
        return t

    # -- the steps a cluster (sim.cluster) takes for each of its engines, in time order -----
    def prepare(self) -> StepPlan | None:
        """Events due handled, the next step planned; None: nothing before the next event."""
        return self._prepare()

    def next_event_s(self) -> float | None:
        """When the next event (an arrival, a tool's return, a pin's deadline) is due."""
        return self._next_event_s()

    def advance(self, dt_s: float) -> None:
        """Time passes with nothing computing."""
        self._advance(dt_s)

    def step(self, plan: StepPlan, length: tuple[int, float] | None = None) -> None:
        """Runs a plan that ``prepare`` gave (``length``: as ``run_length`` said)."""
        self._step(plan, length)

    def run_length(self, plan: StepPlan) -> tuple[int, float]:
        """How many of the plan's steps run before the next event, and their time."""
        _dec, _chunks, k, times = plan
        if isinstance(times, float):  # one step
            return k, times
        dt = times.s(k)
        t_next = self._run_bound_s()
        if t_next is not None and self.now + dt > t_next:
            k, dt = times.reach(self.now, t_next, k, dt)
        return k, dt

    def _advance(self, dt: float) -> None:
        self.metrics.pinned_block_s += self.kv.pinned * dt
        self.now += dt

    def _handle_events(self) -> None:
        now = self.now
        events = self._events
        arrived = False
        while events and events[0][0] <= now:
            _, _, kind, obj = heapq.heappop(events)
            if kind != _READY:
                # vLLM adds requests one at a time, each reading the clock: no two arrive at
                # one instant (programs of one instant would be one admission cohort).
                if arrived:
                    self._advance(math.nextafter(now, math.inf) - now)
                    now = self.now
                arrived = True
            if kind == _PROGRAM:
                if type(obj) is ProgramRun:  # placed here by a cluster's router
                    run = obj
                    run.arrival_s = now
                else:
                    run = ProgramRun(cast(Program, obj), now)
                self.metrics.program_started(run.program.program_id, now)
                self._issue(run, 0)
            elif kind == _ISSUE:
                issued, index = cast("tuple[ProgramRun, int]", obj)  # (no alias built per event)
                self._issue(issued, index)
            # _READY needs no action: the call is already in the batch, now ready.
        # Then pins due: as vLLM adds the requests that came during a step before it schedules
        # the next (where TTLScheduler expires pins), a call back by then takes its program's
        # pin over even if the deadline fell within that step.
        deadline = self.policy.next_deadline()
        if deadline is not None and deadline <= now:
            for program in self.policy.expire(now):
                self.kv.unpin(program)
            if self.policy.prefetches:
                self._prefetch(now)

    def _prefetch(self, now: float) -> None:
        """The policy's prefetches due (``Policy.prefetch``): each program's CPU-tier run is
        copied back to the GPU, pinned, over the host link from now on; its call, if admitted
        before the copy ends, waits for it as for a reload."""
        kv, b = self.kv, self.config.block_tokens

        keeps = self.policy.prefetch_keeps_cached

        def load(program: str) -> int:
            blocks = kv.prefetch(program)
            if blocks:
                kv.loading[program] = now + self.hw.transfer_s(blocks * b)
            elif keeps:  # nothing to copy: the chain is pinned where it is, if it is free
                return kv.keep(program)
            return blocks

        self.policy.prefetch(now, load)

    def _issue(self, run: ProgramRun, index: int) -> None:
        call = Call(next(self._ids), run, index, self.now)
        if index:
            self._count_long_return(call)
        if run.program.common_blocks:  # (the common prefix its prompt begins with: kv_cache)
            self.kv.share(call.program_id, run.program.common_blocks)
        policy = self.policy
        if policy.arrive(call, self.now) and not policy.holds_handed_pins:
            self.kv.unpin(call.program_id)  # the pin served its purpose: blocks stay cached

    def _count_long_return(self, call: Call) -> None:
        """A returning call whose tool ran longer than reloading its reusable prefix from
        the CPU tier would take (a prefetch could have had it back in time): counted, and
        whether that prefix is on the GPU now, its arrival, fully copied (issue 46)."""
        b = self.config.block_tokens
        max_hit = (call.prompt - 1) // b  # (as admission counts a hit)
        need = call.turn.reusable_blocks
        if max_hit < need:
            need = max_hit
        if need <= 0 or cast(float, call.gap_s) <= self.hw.transfer_s(need * b):
            return
        kv = self.kv
        loaded_s = kv.loading.get(call.program_id) if kv.loading else None
        on_gpu = kv.chain_blocks(call.program_id) >= need
        self.metrics.long_return(on_gpu and (loaded_s is None or loaded_s <= self.now))

    # -- admission ------------------------------------------------------------------------
    def _admit(self) -> None:
        """Admits waiting calls; ``run`` calls it when a sequence slot is free and a call waits."""
        cfg, policy, kv = self.config, self.policy, self.kv
        running = self.running
        budget_free = cfg.token_budget
        for c in running:
            left = c.prompt - c.computed
            budget_free -= left if left > 1 else 1
        while len(running) < cfg.max_seqs and budget_free > 0:
            call = policy.peek()
            if call is None:
                return
            total = -(-call.prompt // cfg.block_tokens)
            if total > kv.capacity:
                raise ValueError(
                    f"program {call.program_id!r} call {call.turn_index} needs {total} KV blocks "
                    f"but the engine holds {kv.capacity}: cap contexts (--max-context)"
                )
            b = cfg.block_tokens
            reusable = call.prompt // b if call.preempted else call.turn.reusable_blocks
            got = kv.hit(call.program_id, reusable, total)
            if got is None:
                if policy.reclaims_ahead:
                    return  # (pins were weighed before the step) head-of-line waits
                need = total - kv.available_for(call.program_id)
                # a preempted call was running: it asks as running calls do (any pin)
                asker = None if call.preempted else call.program_id
                released = policy.reclaim(need, self.now, asker)
                if not released:
                    return  # head-of-line waits for memory (hit would refuse again)
                for program in released:
                    kv.unpin(program)
                if policy.peek() is not call:
                    # A program that lost its pin lost its place too (pinned programs go
                    # first under the published order): admit the new head.  Each pass
                    # releases a pin, so this ends.
                    continue
                got = kv.hit(call.program_id, reusable, total)
                if got is None:
                    return  # head-of-line waits for memory
            popped = policy.pop()  # (a held handed-over chain is the call's own: kv.take)
            if popped is not call:
                raise RuntimeError(
                    f"policy {policy.name!r} popped call {popped.call_id} after peeking "
                    f"{call.call_id}: pop must return the call peek returned"
                )
            self._start(call, got, reusable, budget_free)
            running.append(call)
            budget_free -= call.prompt - call.computed

    def _start(self, call: Call, got: tuple[int, int], reusable: int, budget_free: int) -> None:
        """The popped call takes its hit (``got``: GPU and CPU blocks of its ``reusable``
        ones) and first chunk's blocks, waits for a reload from the CPU tier or a prefetch
        still copying, and is counted; the policy is told."""
        b, kv, policy = self.config.block_tokens, self.kv, self.policy
        gpu_hit, cpu_hit = got
        # A fully cached prompt still computes its last token, and vLLM recomputes that
        # token's whole block (hits stop at prompt - 1 tokens, block-aligned:
        # KVCacheManager.get_computed_blocks, vllm/v1/core/kv_cache_manager.py).
        max_hit_blocks = (call.prompt - 1) // b
        hit_blocks = gpu_hit + cpu_hit
        hit_tokens = (hit_blocks if hit_blocks < max_hit_blocks else max_hit_blocks) * b
        # vLLM allocates the hit and the first chunk only (KVCacheManager.allocate_slots
        # with the step's num_new_tokens); later chunks come when they are scheduled.
        first = call.prompt - hit_tokens
        if first > budget_free:
            first = budget_free
        blocks = -(-(hit_tokens + first) // b)
        # (when a prefetch of the chain, if any, ends: read before take forgets it)
        loading_s = kv.loading.get(call.program_id) if kv.loading else None
        kv.take(call.program_id, blocks)
        call.computed = hit_tokens
        call.blocks = blocks
        call.admit_s = self.now
        call.admit_seq = next(self._admits)
        call.ready_s = self.now + (self.hw.transfer_s(cpu_hit * b) if cpu_hit else 0.0)
        if loading_s is not None and loading_s > call.ready_s:  # a prefetch still copying
            call.ready_s = loading_s
            self._push(loading_s, _READY, call)
            if loading_s > self._ready_max_s:
                self._ready_max_s = loading_s
        elif cpu_hit:
            self._push(call.ready_s, _READY, call)
            if call.ready_s > self._ready_max_s:
                self._ready_max_s = call.ready_s
        m = self.metrics
        if not call.preempted:
            m.input_tokens += call.prompt
            m.hit_tokens += hit_tokens
            if cpu_hit:
                m.reloaded_tokens += min(cpu_hit * b, hit_tokens)
            lost = (reusable if reusable < max_hit_blocks else max_hit_blocks) * b - hit_tokens
            if lost > 0:
                m.recomputed_tokens += lost
            m.queued(call.turn_index > 0, lost > 0, self.now - call.issue_s)
        else:
            m.recomputed_tokens += call.prompt - hit_tokens
        policy.admitted(call, self.now, call.turn_index > 0 and reusable > gpu_hit + cpu_hit)

    # -- one step, or a run of identical steps --------------------------------------------
    def _step(self, plan: StepPlan, length: tuple[int, float] | None = None) -> None:
        """Runs the plan (``length``: its steps and time, as ``run_length`` said; a cluster
        orders engines by it)."""
        dec, chunks, k, times = plan
        now = self.now
        if length is not None:
            k, dt = length
        elif not isinstance(times, float):  # a run of k > 1 steps: stop at the next event
            dt = times.s(k)
            t_next = self._run_bound_s()
            if t_next is not None and now + dt > t_next:
                k, dt = times.reach(now, t_next, k, dt)
        else:  # one step
            dt = times
        pinned = self.kv.pinned
        if pinned:  # (adding 0 * dt, +0.0, would leave the sum as it is)
            self.metrics.pinned_block_s += pinned * dt  # self._advance(dt)
        self.now = now + dt
        if chunks and self._stepped is not None:
            self._stepped(chunks, times.s(1) if not isinstance(times, float) and k > 1 else dt)
        self._apply(dec, chunks, k)

    def _plan(self, active: list[Call]) -> StepPlan | None:
        """The next run of identical steps, its first step's blocks allocated (as vLLM
        allocates a step's blocks when it schedules it); None after freeing memory (plan
        again)."""
        b = self.config.block_tokens
        dec, pre, grow1, k, ctx = _split_batch(active, b)
        n_dec = len(dec)
        # Prefill chunks from the rest of the token budget, in admission order.
        chunks: list[tuple[Call, int]] = []
        budget = self.config.token_budget - n_dec
        for c in pre:
            if budget <= 0:
                break
            n = c.prompt - c.computed
            if n > budget:
                n = budget
            chunks.append((c, n))
            budget -= n
        k, tokens, attn0, kv0, d_attn, d_kv = _step_shape(n_dec, ctx, k, chunks, budget)
        # The first step's blocks, allocated now: decode growth and chunks past the blocks
        # their calls hold (a just-admitted call's first chunk was allocated at admission).
        kv = self.kv
        avail = kv.capacity - kv.used  # kv.available()
        need = len(grow1)
        chunk_wants = []  # (call, blocks it holds after this step's chunk) where that grows
        for c, n in chunks:
            want = -(-(c.computed + n) // b)
            if want > c.blocks:
                need += want - c.blocks
                chunk_wants.append((c, want))
        if need:
            if need > avail:
                self._free_memory(need - avail)
                return None
            for c in grow1:
                c.blocks += 1
            for c, want in chunk_wants:
                c.blocks = want
            kv.grow(need)
            avail -= need
        # The run's later steps: decode growth adds at most ceil(k / block) blocks to a call in
        # k steps, a long prefill one chunk's blocks a step; only when that bound does not fit
        # is the need counted, and the run shortened to what fits (at least its first step).
        if k > 1:
            bound = n_dec * -(-k // b)
            if chunks:
                c, n = chunks[0]
                bound += -(-(c.computed + n * k) // b) - c.blocks
            if bound > avail and self._run_need(dec, chunks, k) > avail:
                k = self._fit_memory(dec, chunks, k, avail)
        seqs = n_dec + len(chunks)
        run = None
        if k > 1 and kv.eviction_order is not None and bound > avail - kv.cached:
            run = self._steps.run(tokens, attn0, d_attn, kv0, d_kv, seqs)
            k = self._one_order_steps(dec, chunks, k, avail - kv.cached, run)
        if k == 1 and self.one_step_shortcut:  # StepRun.s(1)'s float, without the run
            return dec, chunks, 1, self._steps.step_s(tokens, attn0, kv0, seqs)
        if run is None:
            run = self._steps.run(tokens, attn0, d_attn, kv0, d_kv, seqs)
        return dec, chunks, k, run

    def _one_order_steps(
        self, dec: list[Call], chunks: list[tuple[Call, int]], k: int, free: int, run: RunTimes
    ) -> int:
        """How many of a run's ``k`` steps to take under a policy's eviction order, which
        reads the clock (next uses move with time).  vLLM allocates a step's blocks when it
        schedules the step, so a step that evicts evicts in the order of its own start; the
        run allocates its later steps' blocks at its end, in the order of then.  So the run
        ends before its first step that evicts (the ``free`` blocks, uncached, run out),
        unless the order stays the same from that step's start to the run's end."""
        if self._run_need(dec, chunks, k) <= free:
            return k
        change_s = self._order_change_s
        now = self.now
        run_s = run.s(k)
        t_next = self._run_bound_s()  # the run stops there (``_step``): look no further
        if t_next is not None and now + run_s > t_next:
            run_s = run.reach(now, t_next, k, run_s)[1]
        end_s = now + run_s
        programs = self.kv.free_programs()
        # From the second step's start first: most often the order holds all along, and the
        # first step that evicts need not be found.
        change_at = change_s(programs, now + run.s(1), end_s)
        if change_at is None:  # (the policy cannot say when its order changes)
            return self._fit_memory(dec, chunks, k, free)
        if change_at > end_s:
            return k
        quiet = self._fit_memory(dec, chunks, k, free)  # the steps that evict nothing
        first_s = now + run.s(quiet)
        if change_at > first_s or cast(float, change_s(programs, first_s, end_s)) <= end_s:
            return quiet
        return k

    def _run_need(self, dec: list[Call], chunks: list[tuple[Call, int]], k: int) -> int:
        """Blocks a run of k steps needs past those its calls hold (one chunk when k > 1)."""
        b = self.config.block_tokens
        need = 0
        k1 = k - 1
        for c in dec:
            # after k steps the call holds prompt + generated + k − 1 tokens of KV
            want = -(-(c.prompt + c.generated + k1) // b)
            if want > c.blocks:
                need += want - c.blocks
        for c, n in chunks:
            want = -(-(c.computed + n * k) // b)
            if want > c.blocks:
                need += want - c.blocks
        return need

    def _fit_memory(
        self, dec: list[Call], chunks: list[tuple[Call, int]], k: int, avail: int
    ) -> int:
        """The most steps (1 ≤ k' ≤ k) whose blocks fit in ``avail`` (the first step's are
        allocated)."""
        lo, hi = 1, k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._run_need(dec, chunks, mid) <= avail:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _free_memory(self, short: int) -> None:
        """A step is ``short`` blocks short: pins are reclaimed (the policy chooses), else the
        most recently admitted call is preempted, as vLLM preempts the last running request
        when ``allocate_slots`` fails (Scheduler.schedule) — possibly the one short of it."""
        released = self.policy.reclaim(short, self.now)
        for program in released:
            self.kv.unpin(program)
        if not released:
            self._preempt()

    def _preempt(self) -> None:
        victim = max(self.running, key=lambda c: c.admit_seq)
        self.running.remove(victim)
        b = self.config.block_tokens
        # vLLM cached every full block of computed KV, generated tokens' too
        chain = (victim.computed + max(0, victim.generated - 1)) // b
        self.kv.release(victim.program_id, victim.blocks, chain, Verdict.FREE)
        # Recompute: the prompt now includes what was generated.
        victim.prompt = victim.prompt + victim.generated
        victim.output -= victim.generated
        victim.generated = 0
        victim.computed = 0
        victim.blocks = 0
        victim.preempted = True
        self.metrics.preemptions += 1
        self.policy.requeue(victim, self.now)

    def _apply(self, dec: list[Call], chunks: list[tuple[Call, int]], k: int) -> None:
        b = self.config.block_tokens
        kv, m, now = self.kv, self.metrics, self.now
        done: list[Call] = []
        growth = 0
        for c in dec:
            generated = c.generated + k
            want = -(-(c.prompt + generated - 1) // b)
            if want > c.blocks:
                growth += want - c.blocks
                c.blocks = want
            c.generated = generated
            if generated >= c.output:
                done.append(c)
        output_tokens = len(dec) * k
        prefill_tokens = 0
        for c, n in chunks:
            prefill_tokens += n
            computed = c.computed + n * k
            c.computed = computed
            want = -(-computed // b)  # a run's chunks past its first (allocated when planned)
            if want > c.blocks:
                growth += want - c.blocks
                c.blocks = want
            if computed >= c.prompt:
                output_tokens += 1
                c.generated += 1
                if c.first_token_s is None:
                    c.first_token_s = now
                    m.ttft(now - c.issue_s)
                if c.generated >= c.output:
                    done.append(c)
        # One allocation for the run's later steps: the same blocks are evicted as by one
        # allocation per call and step, since the order of what is left after an eviction is
        # the rest of the same order (a policy's order, which reads the clock, is the same
        # from the first step that evicts to the run's end: ``_one_order_steps``).
        if growth:
            ok = kv.grow(growth)
            assert ok, "a run's blocks were checked against free memory"
        m.output_tokens += output_tokens
        m.prefill_tokens += prefill_tokens * k
        used = kv.used + kv.cached
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used
        for c in done:
            self._finish(c)

    def _finish(self, call: Call) -> None:
        self.running.remove(call)
        run = call.prog
        turns = run.program.turns
        last = call.turn_index == len(turns) - 1
        b = self.config.block_tokens
        # vLLM caches every full block of computed KV, output included (the last token's KV
        # is never computed): KVCacheManager.allocate_slots, vllm/v1/core/kv_cache_manager.py
        chain = (call.prompt + call.generated - 1) // b
        run.attained_s += self.now - (call.admit_s or self.now)
        held = call.blocks
        verdict = self.policy.finished(call, self.now, chain if chain < held else held, last)
        if last:
            # vLLM frees the blocks still cached, to the most-recently-used end of its free
            # queue (BlockPool.free_blocks, vllm/v1/core/block_pool.py): they are evicted after
            # every older chain although the program never returns.  Its CPU-tier run goes.
            self.kv.drop(call.program_id, 0)
            verdict = Verdict.FREE
        self.kv.release(call.program_id, call.blocks, chain, verdict)
        self.metrics.call_finished(call.program_id, self.now)
        if not last:
            nxt = turns[call.turn_index + 1]
            if self.forward is not None:
                self.forward(self.now + nxt.think_s, run, call.turn_index + 1)
            else:
                self._push(self.now + nxt.think_s, _ISSUE, (run, call.turn_index + 1))
            return
        self.policy.program_done(call.program_id, len(turns))
        self.metrics.program_finished(call.program_id, self.now, sum(t.think_s for t in turns))
        if self.forward is not None:
            self.forward(self.now, run, None)
        if self._arrivals is not None:
            prog = self._arrivals.replacement()
            if prog is not None:
                self._push(self.now, _PROGRAM, prog)


def _split_batch(active: list[Call], b: int) -> tuple[list[Call], list[Call], list[Call], int, int]:
    """The running calls that may compute, split: decoding calls, calls still prefilling,
    the decoding calls whose next token starts a block; the steps until the first decoding
    call is done (``_NO_LIMIT``: none decodes) and the decoding calls' context summed (a
    decoding call holds the KV of all but its last token)."""
    dec: list[Call] = []
    pre: list[Call] = []
    grow1: list[Call] = []
    dec_append = dec.append  # (bound once: a method looked up per call per step adds up)
    k = _NO_LIMIT
    ctx = 0
    for c in active:
        prompt = c.prompt
        if c.computed >= prompt:
            dec_append(c)
            generated = c.generated
            left = c.output - generated
            if left < k:
                k = left
            held = prompt + generated  # KV tokens after this step's token
            ctx += held
            if held > c.blocks * b:
                grow1.append(c)
        else:
            pre.append(c)
    return dec, pre, grow1, k, ctx


def _step_shape(
    n_dec: int, ctx: int, k: int, chunks: list[tuple[Call, int]], budget: int
) -> tuple[int, int, float, int, int, int]:
    """``(k, tokens, attention units, KV tokens touched, their growth per step)`` of a run
    of steps of ``n_dec`` decoding calls (context ``ctx``) and prefill ``chunks`` (``budget``:
    the tokens the chunks left): ``k`` shortened to the steps the shape holds."""
    attn0: float
    if not chunks:
        tokens = d_attn = d_kv = n_dec
        attn0 = kv0 = ctx
    elif len(chunks) == 1:  # the sums below, over one chunk
        c, n = chunks[0]
        # one long prefill chunked at the full budget runs while its chunks last
        if budget == 0:
            runs = (c.prompt - c.computed) // n
            if runs < k:
                k = runs
        else:
            k = 1
        tokens = n_dec + n
        attn0 = ctx + (n * c.computed + n * (n + 1) / 2.0)
        kv0 = ctx + (c.computed + n)
        grow = n if k > 1 else 0
        d_attn = n_dec + grow**2
        d_kv = n_dec + grow
    else:
        k = 1
        tokens = n_dec + sum(n for _, n in chunks)
        attn0 = ctx + sum(n * c.computed + n * (n + 1) / 2.0 for c, n in chunks)
        kv0 = ctx + sum(c.computed + n for c, n in chunks)
        d_attn = d_kv = n_dec
    assert k != _NO_LIMIT, "a running call that does not decode gets a chunk"
    return k, tokens, attn0, kv0, d_attn, d_kv
