"""ttlpolicy: the full CacheTTL model, driven through the library — ``ttlpolicy.TTLPolicy``
decides each pin's TTL, ``ttlpolicy.ProgramScheduler`` orders the waiting queue, keeps the
pin table, expires and reclaims pins.  No rule of theirs is restated here: this module only
translates engine events into their calls and their answers into engine actions, as the vLLM
adapter (``ttlpolicy_vllm.TTLScheduler``, what users deploy) translates vLLM's.

The cost of a lost prefix is priced as the adapter prices it: the library's
``TTLPolicy.miss_cost_s``, fed as the adapter feeds it — after each step that started a
call's prefill, the tokens of those first chunks, the tokens cached before them and the
step's seconds (``observe_prefill``); the policy's configured line until its fit has enough
samples; the step's fixed cost once per chunk of the engine's token budget
(``prefill_chunk_tokens``).  The variant ``ttlpolicy:exact`` (``adapter=False``) prices it
with the simulator's exact prefill time instead, an oracle no engine has: the distance
between the two is what the deployed miss model costs (bench/RESULTS.md, "Simulator
fidelity — the TTL policy as the adapter runs it").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ttlpolicy as tp
from ttlpolicy.pin_claims import PinClaim, claim_pin, continues_context
from ttlpolicy.prefill_sample import step_prefill_sample
from ttlpolicy.serving.skip_ahead import HeadSkips, check_skip_depth, skip_depth_for

from ..call import Call
from ..interface import EngineView, PolicyHooks, Unpin, Verdict
from .base import prompt_fits, step_shortfall
from .program_ids import MODES, ProgramIds


class TTLPolicyPlugin(PolicyHooks):
    """Implements ``sim.interface.Policy`` on ``ttlpolicy.ProgramLifecycle``."""

    name = "ttlpolicy"
    #: whether a waiting call may take only the pins of programs younger than its own
    fcfs_reclaim = False
    #: a pin handed over on arrival keeps its blocks held till the call is admitted, as
    #: TTLScheduler holds them (the lifecycle's held chains)
    holds_handed_pins = True
    #: pins give way before each step (``give_way``), as TTLScheduler releases them, not
    #: when the head of the queue does not fit
    reclaims_ahead = True
    # set by ``bind``, before the engine calls anything else
    view: EngineView
    ttl_policy: tp.TTLPolicy
    sched: tp.ProgramScheduler
    life: tp.ProgramLifecycle

    def __init__(
        self,
        config: tp.PolicyConfig | None = None,
        pin_budget_fraction: float = 0.5,
        *,
        admission: bool = True,
        evict_by_next_use: bool = True,
        classic: bool = False,
        adapter: bool = True,
        attained_order: bool = True,
        ids: str = "explicit",
        pin_claims: str = "supersede",
        skip_depth: int | None = None,
    ) -> None:
        if ids not in MODES:
            raise ValueError(f"ids must be one of {', '.join(MODES)}, got {ids[:64]!r}")
        if pin_claims not in PIN_CLAIMS:
            raise ValueError(
                f"pin_claims must be one of {', '.join(PIN_CLAIMS)}, got {pin_claims[:64]!r}"
            )
        #: which program ids the policy sees (``program_ids``): the trace's, none, or linked
        self.ids = ids
        self._ids: ProgramIds | None = None
        if not 0.0 <= pin_budget_fraction <= 1.0:
            raise ValueError(f"pin_budget_fraction must be in [0, 1], got {pin_budget_fraction!r}")
        self.config = config
        # The default model switches load control on; ``classic`` is the model without it.
        self._switches = {
            "admission": admission and not classic,
            "evict_by_next_use": evict_by_next_use and not classic,
        }
        # serve returning calls by attained service where a lost cache reloads from a tier
        # (``TTLPolicyOffload``; without a tier the order stays program FCFS)
        self.attained_order = attained_order and not classic
        self.pin_budget_fraction = pin_budget_fraction
        # past a head too large for memory, the first of the next ``skip_depth`` waiting calls
        # that fits runs (``ttlpolicy.serving.skip_ahead``; None: the engine's default)
        # (the default is the adapters': on where lost blocks reload from a tier)
        self._head_skips = HeadSkips(
            skip_depth_for(self.uses_cpu_tier) if skip_depth is None else skip_depth
        )
        self._skip_to: str | None = None  # the call ``peek`` named past the head, if any
        self._giving_way = False  # (pins give way for the library's head, not a skip)
        #: calls run past a head too large for memory
        self.skips = 0
        # what a program's call that does not continue its pinned context does (``PIN_CLAIMS``)
        self.pin_claims = pin_claims
        # calls served as anonymous one-call programs (``refuse``): request id -> their program
        self._anonymous: dict[str, str] = {}
        # program -> leading blocks of its pinned turn's prompt its calls since have kept
        self._kept_since_pin: dict[str, int] = {}
        #: pins released so (the adapters' ``contexts_superseded``), claims refused
        self.contexts_superseded = 0
        self.pin_claims_refused = 0
        #: block-seconds of the pins a call did not continue: pinned before that call's
        #: arrival, and after it (``_not_continued``)
        self.not_continued_block_s = {"before_arrival": 0.0, "after_arrival": 0.0}
        # program -> since when it holds its pin; a taken pin's call -> (blocks, arrival)
        self._pinned_since: dict[str, float] = {}
        self._taken_at: dict[str, tuple[int, float]] = {}
        self._refused_pins: set[str] = set()  # programs whose pin a call was refused
        # engine programs whose pins were superseded, unpinned by the engine at once
        # (``next_deadline`` says now; ``expire`` hands them over)
        self._superseded: list[str] = []
        # policy program -> full prompt blocks of its latest finished call (its pin's turn)
        self._prompt_blocks: dict[str, int] = {}
        # price a lost prefix by the policy's fit, as TTLScheduler (False: the exact prefill)
        self.adapter = adapter
        self._calls: dict[str, Call] = {}
        # calls admitted fresh (not after a preemption) whose first prefill chunk has not run
        self._unstarted: set[int] = set()
        # The head refused admission, and when its answer may next change with no event
        # (``AdmissionControl.next_shrink_s``): the engine stops a run of steps there, as vLLM
        # asks at every step.  Until then, or an event, the answer is known: not asked again.
        self._refused_rid: str | None = None
        self._refused_until_s = math.inf

    def bind(self, view: EngineView) -> None:
        self.view = view
        total = self._total_blocks(view)
        cfg = self.config or self.default_config(view)
        self.ttl_policy = tp.TTLPolicy(cfg)
        self._total = total
        self.sched = tp.ProgramScheduler(
            self.ttl_policy,
            total_blocks=total,
            pin_budget_blocks=int(total * self.pin_budget_fraction),
        )
        self.admission = None
        if cfg.admission or cfg.evict_by_next_use:
            self.admission = tp.AdmissionControl(self.ttl_policy, total_blocks=total)
        self.life = tp.ProgramLifecycle(self.sched, self.admission)
        # The controller whose working-set rule gates the head of the queue, if it does (its
        # next_shrink_s says until when a refusal stands).
        self._gate = self.admission if cfg.admission else None
        self._block_tokens = view.config.block_tokens
        if self.ids != "explicit":
            self._ids = ProgramIds(self.ids, self._block_tokens)

    def default_config(self, view: EngineView) -> tp.PolicyConfig:
        """The policy's config for the engine ``view`` shows, used by ``bind`` when none was
        given: the model's KV bytes per token, the engine's token budget as the prefill chunk
        and the load-control switches (``load_control_switches``)."""
        # (the engine chunks prefills at its token budget, as vLLM does: a lost prefix is
        # rebuilt in that many steps; the fitted price, with ``adapter``, counts them)
        return tp.PolicyConfig(
            kv_bytes_per_token=view.hardware.kv_bytes_per_token,
            prefill_chunk_tokens=view.config.token_budget,
            **self._switches,
        )

    @property
    def load_control_switches(self) -> dict[str, bool]:
        """The ``PolicyConfig`` switches of load control this plug-in sets by default
        (``admission``, ``evict_by_next_use``; both off when ``classic``): a copy."""
        return dict(self._switches)

    @property
    def admission_gate(self) -> tp.AdmissionControl | None:
        """The load controller whose working-set rule gates the head of the queue, None when
        admission is off (set by ``bind``)."""
        return self._gate

    @property
    def unstarted_calls(self) -> set[int]:
        """The ids of calls admitted fresh (not after a preemption) whose first prefill chunk
        has not run: ``stepped`` takes its prefill samples from them and removes them.  The
        live set, not a copy: a replacement of ``stepped`` removes the calls it samples."""
        return self._unstarted

    @staticmethod
    def _total_blocks(view: EngineView) -> int:
        return view.hardware.kv_capacity_blocks(view.config.block_tokens)

    # -- queue ----------------------------------------------------------------------------
    def arrive(self, call: Call, now: float) -> bool:
        b = self._block_tokens
        rid = str(call.call_id)
        self._calls[rid] = call
        blocks = -(-call.prompt // b)
        if blocks > self._total:
            blocks = self._total
        self._refused_rid = None  # (admission's state changed: ask again)
        pid = call.program_id if self._ids is None else self._ids.arrive(call, now)
        claim = self._claim(call, pid)
        since_s = self._pinned_since.pop(pid, now)
        if claim is PinClaim.SUPERSEDE:
            pid = self._not_continued(call, pid, now, since_s)
        return self.life.arrive(rid, pid, now, blocks) is not None

    def _not_continued(self, call: Call, pid: str, now: float, since_s: float) -> str:
        """A call of ``pid`` that does not continue its pin (pinned since ``since_s``), as
        ``pin_claims`` says; the program the call is served as.  Books the pin's block-seconds
        to the call's arrival, and after it: none (superseded), to its deadline (refused:
        what an adapter keeps pinned; the engine's chain is the call's at its admission), to
        the call's admission (taken)."""
        rid = str(call.call_id)
        pin = self.sched.pin(pid)
        blocks = 0 if pin is None else pin.blocks
        self.not_continued_block_s["before_arrival"] += blocks * (now - since_s)
        if self.pin_claims == "take":
            self._taken_at[rid] = (blocks, now)
            return pid
        if self.pin_claims == "refuse":
            if pin is not None and pid not in self._refused_pins:  # (booked once a pin)
                self._refused_pins.add(pid)
                self.not_continued_block_s["after_arrival"] += blocks * max(
                    0.0, pin.deadline_s - now
                )
            self.pin_claims_refused += 1
            anonymous = self._anonymous[rid] = f"anonymous:{rid}"  # the pin kept, to its TTL
            return anonymous
        self.contexts_superseded += 1
        ids = self._ids
        engine = call.program_id if ids is None else ids.previous_engine
        self._superseded.append(engine if engine is not None else call.program_id)
        return pid

    def _claim(self, call: Call, pid: str) -> PinClaim:
        """What the call does with its program's pin (``ttlpolicy.pin_claims``): the trace
        says which leading blocks it shares with its program's previous prompt; a linked
        call, what the linker found of its program's latest turn."""
        holds = self.sched.pin(pid) is not None
        ids = self._ids
        if not holds:
            return PinClaim.NO_PIN
        if ids is None:
            # (after calls served as anonymous, what is left of the pinned turn's prompt: the
            # least any of them kept, hashes being chained)
            shared = min(call.turn.reusable_blocks, self._kept_since_pin.get(pid, 1 << 62))
            pinned = self._prompt_blocks.get(pid, 0)
            self._kept_since_pin[pid] = shared
        else:
            link = ids.last_link
            pinned = self._prompt_blocks.get(pid, 0)
            shared = 0 if link is None or link.kind == "new" else link.depth_blocks
        return claim_pin(holds, continues_context(pinned, min(shared, pinned)))

    def _program(self, call: Call) -> str:
        """The program the policy sees for ``call`` (``ids``; a refused claim's own)."""
        if self._anonymous:
            anonymous = self._anonymous.get(str(call.call_id))
            if anonymous is not None:
                return anonymous
        return call.program_id if self._ids is None else self._ids.of_call(call)

    def _engine_programs(self, programs: list[str]) -> list[str]:
        ids = self._ids
        return programs if ids is None else [ids.to_engine(p) for p in programs]

    def policy_program(self, engine_program: str) -> str:
        """The policy's program for the engine's ``engine_program`` (its latest call's)."""
        return engine_program if self._ids is None else self._ids.to_policy(engine_program)

    def requeue(self, call: Call, now: float) -> None:
        self.sched.preempt(str(call.call_id), now)

    def peek(self) -> Call | None:
        self._skip_to = None
        rid = self.sched.peek()
        if rid is None:
            return None
        call = self._calls[rid]
        gate = self._gate
        if gate is not None:
            now = self.view.now
            if rid == self._refused_rid and now < self._refused_until_s:
                return None  # refused, and nothing that could change that has happened
            if not self.life.may_run(self._program(call), now):
                # the head waits for admission (FCFS: nobody younger may pass)
                self._refused_rid = rid
                self._refused_until_s = gate.next_shrink_s(now)
                return None
        if self._head_skips.depth and not self._giving_way and not self.prompt_fits(rid):
            self._skip_to = self._head_skips.choose(self.sched, rid, self.prompt_fits, self.may_run)
            if self._skip_to is not None:
                return self._calls[self._skip_to]
        return call

    def prompt_fits(self, rid: str) -> bool:
        """Whether waiting call ``rid``'s whole prompt fits in memory now (as the engine
        admits it: free blocks, free cached ones it may evict, its program's own pinned
        chain)."""
        return prompt_fits(self.view, self._calls[rid])

    def may_run(self, rid: str) -> bool:
        """Whether load control lets waiting call ``rid``'s program run now (always without
        it); a yes admits the program."""
        return self._gate is None or self.life.may_run(
            self._program(self._calls[rid]), self.view.now
        )

    def pop(self) -> Call:
        rid, self._skip_to = self._skip_to, None
        if rid is None:
            return self._calls[self.sched.pop(self.view.now)]
        self.sched.take(rid, self.view.now)  # (past the head: the others keep their places)
        self._head_skips.taken()
        self.skips += 1
        return self._calls[rid]

    def waiting(self) -> int:
        return self.sched.waiting_count

    # -- events ---------------------------------------------------------------------------
    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        # (the scheduler learns of admission through ``pop``; a held chain is the call's own
        # now)  A preempted call resumes: vLLM lists it apart from new requests, and the
        # adapter takes no prefill sample from it.
        self.life.admitted(str(call.call_id))
        if self._taken_at:
            taken = self._taken_at.pop(str(call.call_id), None)
            if taken is not None:  # (a pin not continued, held for the call until now)
                self.not_continued_block_s["after_arrival"] += taken[0] * (now - taken[1])
        if not self.adapter:
            return  # (no prefill fit to feed: nothing to track)
        if call.preempted:
            self._unstarted.discard(call.call_id)
        else:
            self._unstarted.add(call.call_id)

    def stepped(self, chunks: list[tuple[Call, int]], step_s: float) -> None:
        """A step ran these prefill chunks in ``step_s``: as ``TTLScheduler`` does, the first
        chunks of newly admitted calls and the step's seconds (decodes in the same batch
        included) are one sample of the policy's prefill-time fit (``step_prefill_sample``)."""
        if not self.adapter:
            return  # (the simulator's exact prefill time prices misses: no fit to feed)
        unstarted = self._unstarted
        if not unstarted:
            return  # (no call waits for its first chunk: no sample, no library call)
        first_chunks = []
        for call, n in chunks:
            if call.call_id in unstarted:
                unstarted.remove(call.call_id)
                first_chunks.append((n, call.computed))  # (the step has not run yet)
        tokens, cached = step_prefill_sample(first_chunks)
        if tokens:
            self.ttl_policy.observe_prefill(tokens, step_s, cached)

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        rid = str(call.call_id)
        del self._calls[rid]
        tokens = chain_blocks * self._block_tokens
        miss_s = self.miss_cost_s(tokens)
        ids = self._ids
        pid = self._program(call)
        if self._anonymous.pop(rid, None) is not None:
            last_turn = True  # served as anonymous (``refuse``): a one-call program, no pin
        else:
            self._prompt_blocks[pid] = call.turn.input_tokens // self._block_tokens
            self._kept_since_pin.pop(pid, None)
        if ids is not None:
            ids.finished(call, now, last_turn)
            last_turn = last_turn or ids.mode == "none"  # (a one-call program: no pin)
        done = self.life.finish(
            rid,
            now,
            chain_blocks,
            tool=call.turn.tool,
            last_turn=last_turn,
            cache_miss_cost_s=miss_s,
        )
        self._refused_rid = None  # (admission's state changed: ask again)
        if done.pinned:
            self._pinned_since.setdefault(pid, now)
            self._refused_pins.discard(pid)
        if last_turn:
            self._prompt_blocks.pop(pid, None)
            self._kept_since_pin.pop(pid, None)
        return Verdict.PIN if done.pinned else Verdict.FREE

    def miss_cost_s(self, tokens: int) -> float:
        """What losing ``tokens`` of cached prefix costs: as the policy has measured this
        engine (``TTLPolicy.miss_cost_s``) with ``adapter``, else exactly."""
        if self.adapter:
            return self.ttl_policy.miss_cost_s(tokens, self._offloaded_tokens(tokens))
        return self._exact_miss_cost_s(tokens)

    def _offloaded_tokens(self, tokens: int) -> int:
        return 0  # no offload tier

    def _exact_miss_cost_s(self, tokens: int) -> float:
        return self.view.prefill_s(tokens)  # recomputing them

    def expire(self, now: float) -> list[str]:
        superseded, self._superseded = self._superseded, []
        return superseded + self._engine_programs([pin.program_id for pin in self.life.expire(now)])

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        # ``fcfs_reclaim``: a waiting call takes only younger programs' pins (the library's
        # rule for ``for_program``); otherwise any pin, latest-arrived program first.
        pid = None
        if self.fcfs_reclaim and for_program is not None:
            pid = self.policy_program(for_program)
        pins = self.sched.reclaim(blocks_needed, now, pid)
        return self._engine_programs([pin.program_id for pin in pins])

    def give_way(self, step_blocks: int, now: float, unpin: Unpin) -> None:
        """Before each step, as ``TTLScheduler`` before vLLM schedules: what the running
        calls' next step and the head of the queue lack (``step_shortfall``) gives way as the
        lifecycle says (``ProgramLifecycle.give_way``: pins; held chains when nothing runs).
        So the step's growth takes a released pin's blocks in the eviction order, not the
        chain next in it before."""
        view = self.view
        self._giving_way = True
        try:
            short, head = step_shortfall(self, view, step_blocks, self._total)
        finally:
            self._giving_way = False
        if short <= 0:
            return
        program = None if head is None else head.program_id

        def release(program_id: str, request_id: str | None) -> int:
            before = view.free_blocks_for(program)
            unpin(program_id if self._ids is None else self._ids.to_engine(program_id))
            return view.free_blocks_for(program) - before

        keep = None if head is None else str(head.call_id)
        stalled = head is not None and not view.running_count
        self.life.give_way(now, short, release, stalled=stalled, keep=keep)

    def next_deadline(self) -> float | None:
        if self._superseded:
            return self.view.now  # (released at once: the engine unpins through ``expire``)
        deadline_s = self.sched.next_deadline_s
        if self._refused_rid is None:
            return deadline_s
        recheck_s = self._refused_until_s
        if recheck_s <= self.view.now or recheck_s == math.inf:  # due now (peek asks), or never
            return deadline_s
        return recheck_s if deadline_s is None or recheck_s < deadline_s else deadline_s

    def program_done(self, program_id: str, turns: int) -> None:
        pass  # the scheduler forgets a program when its last call finishes (``last_turn``)

    def program_left(self, program_id: str) -> bool:
        if self._ids is not None:
            pid = self._ids.ended(program_id)
            if pid is None:
                return False
            program_id = pid
        self._prompt_blocks.pop(program_id, None)
        self._kept_since_pin.pop(program_id, None)
        self._pinned_since.pop(program_id, None)
        self._refused_pins.discard(program_id)
        # Its program ends here, in both parts (a program-level order and load control that
        # disagree on it would deadlock: one ranks it by its first arrival, the other anew):
        # else load control counts it in the working set until it returns, maybe never.
        # η sees the turns it ran here.
        try:
            ended = self.life.end_program(program_id)
        except KeyError:
            return False  # idle long enough to be forgotten: nothing expects it here
        self._refused_rid = None  # (admission's state changed: ask again)
        return ended.pin is not None

    def eviction_order(self) -> Callable[[list[str]], list[str]] | None:
        """The order in which free cached chains are evicted
        (programs, first to go first), or None for LRU.  The library's order is a sort by a
        key of each program's own, which the engine relies on (``KVCache.eviction_order``)."""
        if self.admission is None or not self.ttl_policy.config.evict_by_next_use:
            return None
        ac, view = self.admission, self.view
        order = lambda programs: ac.eviction_order(programs, view.now)  # noqa: E731
        return order if self._ids is None else self._ids.order(order)

    def eviction_order_change_s(
        self, programs: list[str], from_s: float, until_s: float
    ) -> float | None:
        """With ``eviction_order``: the first instant in
        ``(from_s, until_s]`` at which that order of ``programs`` changes, else ``inf``."""
        assert self.admission is not None  # (asked only when eviction_order gave an order)
        if self._ids is not None:
            programs = list(dict.fromkeys(self._ids.to_policy(p) for p in programs))
        return self.admission.next_order_change_s(programs, from_s, until_s)


class TTLPolicyOffload(TTLPolicyPlugin):
    """ttlpolicy on an engine with a CPU tier (as ``vllm-offload``): blocks evicted from the
    GPU stay reloadable, so a dropped cache costs its reload time when that is cheaper than
    recomputing it — the miss cost the policy weighs against holding the blocks.

    With ``adapter``, as the adapter with vLLM's offloading connector: the library prices the
    miss (``min(prefill(all), reload(offloaded) + prefill(rest))``) with the host link's
    bandwidth in its config.  The simulated tier takes blocks when the GPU evicts them where vLLM's
    connector stores them as they are computed; either way the GPU copy, once lost, is in the
    tier, so the offloaded tokens are the prefix up to the tier's size."""

    name = "ttlpolicy-offload"
    uses_cpu_tier = True

    def default_config(self, view: EngineView) -> tp.PolicyConfig:
        """The plug-in's default config (``TTLPolicyPlugin.default_config``) with the host
        link's bandwidth, and the attained-service order where ``attained_order``."""
        hw = view.hardware
        update: dict[str, object] = {
            "offload_bandwidth_bytes_per_s": hw.kv_bytes_per_token / hw.transfer_s(1)
        }
        if self.attained_order:  # a lost cache reloads: least attained service first
            update["serve_order"] = "attained"
        return super().default_config(view).model_copy(update=update)

    def bind(self, view: EngineView) -> None:
        super().bind(view)
        block = view.config.block_tokens
        self._tier_tokens = view.hardware.cpu_capacity_blocks(block) * block  # (frozen: once)

    def _offloaded_tokens(self, tokens: int) -> int:
        tier = self._tier_tokens
        return tier if tier < tokens else tokens

    def _exact_miss_cost_s(self, tokens: int) -> float:
        return min(self.view.prefill_s(tokens), self.view.hardware.transfer_s(tokens))


#: Mechanisms of the default model that a variant name may switch off (ablation); ``order``
#: (serving returning calls by attained service) is on only with a tier (``ttlpolicy-offload``).
MECHANISMS = ("admission", "evict", "pins", "order")
#: What a program's call that does not continue its pinned context does
#: (``ttlpolicy.pin_claims``): ``supersede`` — the pin is released at once, the call served as
#: the program's (the adapters' rule); ``refuse`` — served as an anonymous one-call program,
#: the pin kept to its TTL (the adapters before issue 45 part 3); ``take`` — it takes the pin
#: over as any call of the program (the simulator before issue 44).
PIN_CLAIMS = ("supersede", "refuse", "take")
#: Variant words for the other two (default: ``supersede``)
CLAIM_WORDS = {"refuse-claims": "refuse", "take-claims": "take"}
#: A variant word that prices a lost prefix with the simulator's exact prefill time (an
#: oracle) instead of the library's fit, which the adapters use (``TTLPolicyPlugin.adapter``).
EXACT = "exact"
#: The adapter's pricing, the default; the word is kept for commands written before it was.
ADAPTER = "adapter"
#: A variant word that sets the skip depth (``skip=0``: never skip; the default is the
#: adapters', ``ttlpolicy.serving.skip_ahead.skip_depth_for``)
SKIP_WORD = "skip="


def skip_depth_of(word: str, policy: str) -> int:
    """The depth ``skip=K`` names, refused with the policy's name unless ``K`` is a depth."""
    text = word[len(SKIP_WORD) :]
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{policy}: skip depth must be an integer, got {text[:32]!r}")
    return check_skip_depth(int(text), f"{policy}: skip depth")


#: Variant words for the program ids the policy sees (``program_ids``; default: the trace's)
IDS_WORDS = {"inferred-ids": "inferred", "no-ids": "none"}


def with_ids(policy: str, ids: str) -> str:
    """The policy name ``policy`` with program ids ``ids`` (``--ids``): a ttlpolicy policy
    gains the variant word (``ttlpolicy:inferred-ids``); others, and ``explicit``, unchanged."""
    if ids not in MODES:
        raise ValueError(f"ids must be one of {', '.join(MODES)}, got {ids[:64]!r}")
    name, slash, config = policy.partition("/")  # (bench/bounds.py's config fields)
    base, _, variant = name.partition(":")
    if ids == "explicit" or base not in ("ttlpolicy", "ttlpolicy-offload"):
        return policy
    word = next(w for w, mode in IDS_WORDS.items() if mode == ids)
    return f"{base}:{variant + '+' if variant else ''}{word}{slash}{config}"


def make_ttlpolicy(
    base: str, variant: str = "", cls: Callable[..., TTLPolicyPlugin] | None = None
) -> TTLPolicyPlugin:
    """``ttlpolicy`` or ``ttlpolicy-offload`` with the default model, or a variant:
    ``ttlpolicy:admission+pins`` switches those mechanisms off; ``ttlpolicy:classic`` is the
    model before load control (no admission, LRU eviction, pins by the cost model);
    ``exact`` (alone or with mechanisms: ``ttlpolicy:exact+admission``) prices a lost prefix
    with the simulator's exact prefill time instead of the adapter's fitted price;
    ``inferred-ids`` / ``no-ids`` give the policy linked program ids / none (``program_ids``);
    ``refuse-claims`` / ``take-claims`` what a call not continuing its pin does (``PIN_CLAIMS``);
    ``skip=K`` the skip depth past a head too large for memory (``SKIP_WORD``);
    ``cls`` builds it instead of the base's class (``ttlpolicy_park.make_park``)."""
    if cls is None:
        cls = TTLPolicyOffload if base == "ttlpolicy-offload" else TTLPolicyPlugin
    words = {v.strip() for v in variant.split("+") if v.strip()}
    if {EXACT, ADAPTER} <= words:
        raise ValueError(f"{base}:{variant[:64]}: '{EXACT}' and '{ADAPTER}' are two pricings")
    adapter = EXACT not in words
    id_words = words & IDS_WORDS.keys()
    if len(id_words) > 1:
        raise ValueError(f"{base}:{variant[:64]}: {' and '.join(sorted(id_words))} are two ids")
    ids = IDS_WORDS[id_words.pop()] if id_words else "explicit"
    claim_words = words & CLAIM_WORDS.keys()
    if len(claim_words) > 1:
        raise ValueError(f"{base}:{variant[:64]}: {' and '.join(sorted(claim_words))} clash")
    claims = CLAIM_WORDS[claim_words.pop()] if claim_words else "supersede"
    skip_words = {w for w in words if w.startswith(SKIP_WORD)}
    if len(skip_words) > 1:
        raise ValueError(f"{base}:{variant[:64]}: {' and '.join(sorted(skip_words))} clash")
    skip = skip_words.pop() if skip_words else None
    skip_depth = None if skip is None else skip_depth_of(skip, f"{base}:{variant[:64]}")
    # (ADAPTER: the default)
    off = words - {EXACT, ADAPTER, skip} - IDS_WORDS.keys() - CLAIM_WORDS.keys()
    if off == {"classic"}:
        plugin = cls(
            classic=True, adapter=adapter, ids=ids, pin_claims=claims, skip_depth=skip_depth
        )
    else:
        unknown = off - set(MECHANISMS)
        if unknown:
            raise ValueError(
                f"unknown mechanism {sorted(unknown)[0][:64]!r} in {base}:{variant[:64]}; "
                f"known: {', '.join(MECHANISMS)}, classic, or {EXACT}"
            )
        plugin = cls(
            admission="admission" not in off,
            evict_by_next_use="evict" not in off,
            pin_budget_fraction=0.0 if "pins" in off else 0.5,
            adapter=adapter,
            attained_order="order" not in off,
            ids=ids,
            pin_claims=claims,
            skip_depth=skip_depth,
        )
    if words:
        plugin.name = f"{base}:{'+'.join(sorted(words))}"
    return plugin
