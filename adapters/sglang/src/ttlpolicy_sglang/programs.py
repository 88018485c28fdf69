"""SGLang's requests mapped onto ``ttlpolicy.ProgramScheduler``, and the pins it decides.

Every rule (which request runs first, whether and how long to pin, what gives way under
pressure) lives in ``ttlpolicy`` (``ProgramLifecycle``); this class only tells it what SGLang
did and carries out its answers on the radix tree (``TreeLockPins``).  SGLang drives it
from two places:

* the waiting-queue ordering (``order``, called on each scheduling pass through the
  ``SchedulePolicy.calc_priority`` hook): requests that left the queue since the last pass were
  admitted (``pop``; a request that left finished was aborted), requests back in it were
  retracted (``preempt``), new ones ``arrive`` (a returning program's arrival consumes its pin:
  the locks move to the request until it is admitted and holds the prefix itself); then pins
  past their deadline are released, what the lifecycle says gives way when the queue's head
  would not fit into free plus evictable memory is released (``give_way``; not for a head
  load control holds back: the pass stops at it, as vLLM's queue gate and the simulator
  do), and the queue is sorted by ``ProgramScheduler.priority`` — with a held-back head, the
  requests ``ttlpolicy.serving.tenant_probe`` names that load control lets run (other
  tenants' first programs) are moved before it; with a head load control lets run that still
  does not fit after that, the request ``ttlpolicy.serving.skip_ahead`` names (the first of
  the next ``TTLPOLICY_SKIP_DEPTH`` that fits and may run; on by default with HiCache) is,
  and is taken out of turn (``ProgramScheduler.take``) when SGLang admits it;
* SGLang's prefill admission (``may_run``, called for each candidate through the
  ``PrefillAdder.add_one_req`` hook): with load control on (``ttlpolicy.AdmissionControl``,
  the default) a request whose program the working-set rule refuses stops the pass there, as
  a request that does not fit does; the lifecycle reports arrivals, finishes (footprint,
  tool, what losing the context costs) and ends to it beside the ProgramScheduler;
* the tree cache (``TTLRadixCache``): a turn that finished ``finish``es, and if pinned the node
  its checkpoint ended on is locked; an abort ends the program and frees its pin; an eviction
  that the evictable tokens cannot cover makes pins give way first (and, for an allocation,
  held prefixes: SGLang never retracts its last request).

SGLang tells the cache about arrivals and admissions only through the queue, so both are seen
at the next pass: a request is stamped as arriving when the queue first shows it.  Requests
without a program are one-request programs in arrival order (FCFS, as stock SGLang), never
pinned, ended without an η sample, and never held back by load control
(``AdmissionControl.admit``) — unless ``TTLPOLICY_INFER_PROGRAMS=1``: then each is linked to the
program whose recent turn its prompt continues (``inference.py``), within its tenant.  A request
the library cannot track (its program tables are full: ``arrive`` refuses a new program beyond
``MAX_PROGRAMS`` live ones) is served as stock SGLang would, untracked (after the tracked ones,
in queue order; asked again each pass, keeping the program it was first linked to), not failed.
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any

from sglang.srt.managers.schedule_batch import FINISH_ABORT
from sglang.srt.managers.schedule_policy import CLIP_MAX_NEW_TOKENS
from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey

import ttlpolicy
from ttlpolicy.ids import tenant_of as tenant_of_program
from ttlpolicy.pin_claims import PinClaim, claim_pin
from ttlpolicy.serving import AdapterMetrics, EngineKnobs, exporter_or_none
from ttlpolicy.serving.inferred import InferredPrograms, count_link
from ttlpolicy.serving.skip_ahead import HeadSkips
from ttlpolicy.serving.tenant_probe import TenantQueue, ask_in_turn
from ttlpolicy.toolcalls import tool_name as parse_tool_name

from .identity import ProgramInfo, program_of, request_key, tenant_of
from .inference import HASH_BLOCK_TOKENS, token_hashes
from .pins import TreeLockPins, continuation_point
from .recording import INFERRED_PROGRAM_ATTR

# under "sglang." so that SGLang's logging configuration applies
logger = logging.getLogger("sglang.ttlpolicy")

#: Prefix of the synthetic program id of an anonymous request (one-request program).
ANONYMOUS = "\x00anonymous:"
#: Output tokens decoded to look for a tool call when the client named none.
TOOL_PARSE_TOKENS = 512


class ProgramTracker:
    def __init__(
        self,
        cache: Any,
        total_tokens: int,
        page_size: int,
        knobs: EngineKnobs,
        enable_metrics: bool = False,
    ) -> None:
        self.clock = time.monotonic  # the only clock; tests may replace it
        self._cache = cache
        self.page_size = max(1, int(page_size))
        self.tenancy = knobs.tenancy
        self.policy = ttlpolicy.TTLPolicy(knobs.policy)
        # ProgramScheduler counts blocks: one block is one page of the KV pool.
        self.total_blocks = max(1, int(total_tokens) // self.page_size)
        self.pin_budget_blocks = int(self.total_blocks * knobs.pin_budget_fraction)
        self.programs = ttlpolicy.ProgramScheduler(
            self.policy,
            total_blocks=self.total_blocks,
            pin_budget_blocks=self.pin_budget_blocks,
            tenant_weights=knobs.tenant_weights,  # TTLPOLICY_TENANT_WEIGHTS
        )
        # Load control: which programs may start (None: off, every program may).
        self.admission = (
            ttlpolicy.AdmissionControl(
                self.policy, total_blocks=self.total_blocks, tenant_weights=knobs.tenant_weights
            )
            if knobs.policy.admission
            else None
        )
        self.life = ttlpolicy.ProgramLifecycle(self.programs, self.admission)
        self.pins = TreeLockPins(cache)  # by program
        self.handover = TreeLockPins(cache)  # consumed pins, by the request that consumed them
        # exported with SGLang's own metrics (``--enable-metrics``) unless TTLPOLICY_METRICS=0
        self.metrics = AdapterMetrics(
            pin_budget_blocks=self.pin_budget_blocks,
            total_blocks=self.total_blocks,
            exporter=exporter_or_none(enable_metrics and knobs.metrics),
        )
        # Leading tokens of a node's path a host tier holds (HiCache; set by the cache).
        self.host_tokens: Callable[[Any], int] | None = None
        # requests that name no program: told from their prompts, when asked
        self.inferred = (
            InferredPrograms(lambda kind: count_link(self.metrics, kind))
            if knobs.infer_programs
            else None
        )
        self.log_interval_s = knobs.log_interval_s
        self._head_skips = HeadSkips(knobs.skip_depth)  # TTLPOLICY_SKIP_DEPTH
        self._skipped_to: str | None = None  # the request this pass runs past a large head
        # request -> (tokens it needs, the node its cached prefix ends on), this pass only
        self._needs: dict[str, tuple[int, Any]] = {}
        self._info: dict[str, ProgramInfo | None] = {}  # tracked live requests
        self._untracked: set[str] = set()  # waiting requests the library's tables refused
        self._waiting: dict[str, Any] = {}  # as the ProgramScheduler sees them
        # the waiting requests by tenant, as the last held head's pass listed them
        self._by_tenant: TenantQueue[str] = TenantQueue()
        self._running: dict[str, Any] = {}
        self._t = -math.inf  # latest time given to the ProgramScheduler
        self._last_log = -math.inf

    @property
    def pin_budget_tokens(self) -> int:
        return self.pin_budget_blocks * self.page_size

    def _now(self) -> float:
        # The ProgramScheduler refuses time going back; arrivals are stamped past the clock.
        self._t = max(self.clock(), self._t)
        return self._t

    def _blocks(self, tokens: int) -> int:
        return min(math.ceil(tokens / self.page_size), self.total_blocks)

    # -- the scheduling pass ------------------------------------------------------------------
    def order(self, waiting_queue: list[Any], running_batch: Any = None) -> None:
        """Bring the ProgramScheduler up to date with the queue, expire and reclaim pins, and
        sort ``waiting_queue`` in place (smallest priority first)."""
        now = self._now()
        self._needs.clear()  # (this pass's tree searches: ``_shortfall``)
        present = {request_key(req.rid): req for req in waiting_queue}
        admitted = []
        for key in [k for k in self._waiting if k not in present]:
            if self._waiting[key].finished():
                self._end_request(key)  # aborted while waiting, and not reported
            else:
                admitted.append(key)
        self._start(admitted, now)
        for key, req in present.items():
            if key in self._running:  # retracted: back to the queue, first
                self.programs.preempt(key, now)
                self._waiting[key] = self._running.pop(key)
            elif key not in self._info:
                try:
                    now = self._arrive(key, req, now)
                except ValueError as e:  # the library's tables are full (module doc)
                    logger.debug("ttlpolicy: request %s served untracked: %s", key, e)
                    self._untracked.add(key)  # (its link is kept for the next pass's retry)
        if self._untracked:  # (only at the library's table cap: the pass pays nothing else)
            self._forget_untracked(present, now)
        self.expire()
        waiting_queue.sort(key=self._sort_key)
        self._past_held_head(waiting_queue)
        if waiting_queue and self.life.may_give_way(_nothing_runs(running_batch)):
            head = waiting_queue[0]
            # a head load control holds back needs nothing this pass (the pass stops at it,
            # ``ordering``): pins released for it would lose contexts for no call
            if self._held_back(head) is None:
                self._reclaim_for_head(head, running_batch)
        self._past_large_head(waiting_queue, present, running_batch)
        self.note_pinned()
        if self.admission is not None:
            self.metrics.admitted_programs_now = self.admission.admitted_count
            self.metrics.programs_awaiting_admission_now = self.admission.waiting_count
            if self.metrics.publish_due():  # (a sum over admitted programs: read when exported)
                self.metrics.working_set_blocks_now = self.admission.working_set_blocks(now)
        self.metrics.publish()
        if self.log_interval_s and now - self._last_log >= self.log_interval_s:
            self._last_log = now
            self.metrics.log(logger)

    def _forget_untracked(self, present: dict[str, Any], now: float) -> None:
        """Untracked requests tracked now, or gone from the queue, leave ``_untracked``; a
        gone one's link ends (its finish is not followed: no turn end)."""
        for key in [k for k in self._untracked if k in self._info or k not in present]:
            self._untracked.discard(key)
            if key not in self._info and self.inferred is not None:
                self.inferred.aborted(key, now)

    def _past_held_head(self, waiting_queue: list[Any]) -> None:
        """When load control holds the head back, the requests ``tenant_probe.next_to_ask``
        names that it lets run (other tenants' first programs, read as ``TenantQueue`` says)
        go first this pass; the pass then stops at the held head (``ordering``)."""
        if not waiting_queue or self.admission is None:
            return
        held = self._held_back(waiting_queue[0])
        if held is None:
            return
        programs, tenants = {held}, {tenant_of_program(held)}
        tracked = {  # (a duplicate rid is not the tracked request)
            key: req
            for req in waiting_queue
            if self._waiting.get(key := request_key(req.rid)) is req
        }
        by_tenant = self._by_tenant
        by_tenant.sync(
            (key, tenant_of_program(self._program_of_req(req))) for key, req in tracked.items()
        )
        order = by_tenant.candidates(tenants, lambda key: self._sort_key(tracked[key]))
        asked = [tracked[key] for key in order]
        may_run, refused = self._may_run_now, by_tenant.refused
        ahead = list(ask_in_turn(asked, self._program_of_req, may_run, programs, tenants, refused))
        if ahead:
            chosen = {id(req) for req in ahead}
            waiting_queue[:] = ahead + [req for req in waiting_queue if id(req) not in chosen]

    def _past_large_head(
        self, waiting_queue: list[Any], present: dict[str, Any], running_batch: Any
    ) -> None:
        """When the library's head may run but its prompt does not fit (after pins gave way
        for it), the request ``skip_past`` names goes first this pass; the pass then stops at
        the head (SGLang's ``NO_TOKEN``), as vLLM's scan does."""
        self._skipped_to = None
        if not self._head_skips.depth or not waiting_queue:
            return
        head = waiting_queue[0]
        key = request_key(head.rid)
        if key != self.programs.peek() or self._held_back(head) is not None:
            return
        if self._fits(head, running_batch):
            return

        def fits(rid: str) -> bool:
            req = present.get(rid)
            return req is not None and self._fits(req, running_batch)

        def may_run(rid: str) -> bool:
            return self._held_back(present[rid]) is None

        chosen = self._head_skips.choose(self.programs, key, fits, may_run)
        if chosen is not None:
            self._skipped_to = chosen
            req = present[chosen]
            waiting_queue[:] = [req, *(r for r in waiting_queue if r is not req)]

    def _may_run_now(self, req: Any) -> bool:
        return self._held_back(req) is None

    def _program_of_req(self, req: Any) -> str:
        key = request_key(req.rid)
        return self._program_id(key, self._info[key])

    def _sort_key(self, req: Any) -> tuple[int, Any]:
        key = request_key(req.rid)
        if key in self._waiting:
            return (0, self.programs.priority(key))
        return (1, 0)  # not tracked (a duplicate rid): after the others, in queue order

    def _program_id(self, key: str, info: ProgramInfo | None) -> str:
        return info.program_id if info is not None else request_key(ANONYMOUS + key)

    def _claim_pin(self, program_id: str, prompt_ids: Any) -> None:
        """A call of ``program_id`` (its tenant's own) that does not continue the program's
        pinned context supersedes it: the pin's locks are released now and the call is served
        as the program's next (``ttlpolicy.pin_claims``)."""
        holds = program_id in self.pins.programs()
        continues = holds and self.pins.continues(program_id, prompt_ids)
        if claim_pin(holds, continues) is PinClaim.SUPERSEDE and self.pins.release(program_id):
            self.metrics.contexts_superseded += 1

    def _arrive(self, key: str, req: Any, now: float) -> float:
        info = program_of(req, self.tenancy)
        if info is None and self.inferred is not None:
            tenant = tenant_of(req, self.tenancy)
            hashes = token_hashes(req.origin_input_ids)
            info = self.inferred.arrive(key, tenant, hashes, now)
            setattr(req, INFERRED_PROGRAM_ATTR, info)  # the program a recording writes
        if info is not None:
            self._claim_pin(info.program_id, req.origin_input_ids)
        program_id = self._program_id(key, info)
        blocks = self._blocks(len(req.origin_input_ids) + len(req.output_ids))
        pin = self.life.arrive(key, program_id, now, blocks)
        self._info[key] = info
        self._waiting[key] = req
        if pin is not None:
            self.pins.move(pin.program_id, self.handover, key)
        if info is not None:  # (its pin is its own: consumed now, or at its admission)
            handed = pin is not None or self.programs.pin(program_id) is not None
            self.metrics.arrived(program_id, key, now, handed)
        # Arrivals seen in one pass keep the queue's order: each is stamped a tick later.
        self._t = math.nextafter(now, math.inf)
        return self._t

    def may_run(self, req: Any) -> bool:
        """May SGLang admit ``req`` now?  False only when load control refuses its program
        (a request this pass has not seen arrive is let through, as stock)."""
        program_id = self._held_back(req)
        if program_id is None:
            return True
        self.metrics.held_back(program_id)
        return False

    def _held_back(self, req: Any) -> str | None:
        """The program of ``req`` if load control refuses it now, else None."""
        key = request_key(req.rid)
        if key not in self._waiting:
            return None
        info = self._info[key]
        program_id = self._program_id(key, info)
        if info is None and self.admission is not None:
            self.admission.admit(program_id, self._now())  # anonymous: never held back
            return None
        return None if self.life.may_run(program_id, self._now()) else program_id

    def _start(self, keys: Iterable[str], now: float) -> None:
        """The requests left the waiting queue to run.  The ProgramScheduler pops in its own
        order: requests it pops that SGLang skipped go back to the queue as preempted."""
        left = set(keys)
        skipped = []
        taken, self._skipped_to = self._skipped_to, None
        if taken in left:  # run past a large head (``_past_large_head``): out of turn
            self.programs.take(taken, now)
            self._admitted(taken, now)
            left.discard(taken)
            self._head_skips.taken()
            self.metrics.queue_skips += 1
        while left:
            key = self.programs.pop(now)
            if key is None:
                break
            if key in left:
                left.discard(key)
                self._admitted(key, now)
            else:
                skipped.append(key)
        for key in skipped:
            self.programs.preempt(key, now)

    def _admitted(self, key: str, now: float) -> None:
        self._running[key] = self._waiting.pop(key)
        self.life.admitted(key)
        held_tokens = self.handover.release(key)  # its own lock holds the prefix now
        program_id = self._program_id(key, self._info[key])
        self.metrics.admitted(program_id, key, now, held_tokens)

    def _reclaim_for_head(self, head: Any, running_batch: Any) -> None:
        """What gives way when the queue's head could not be admitted: its uncached tokens,
        its first decode reservation (as SGLang's PrefillAdder clips it) and a page per
        running request exceed the free plus evictable tokens.  Pins yield before requests
        wait; when nothing runs, so do the prefixes held for the other waiting requests (no
        request would end to free memory for the head: a retracted request heads the queue,
        and prefixes held behind it can leave it too little), as
        ``ttlpolicy_vllm.TTLScheduler``'s do — ``ProgramLifecycle.give_way``'s rule."""
        short, node = self._shortfall(head, running_batch)
        self.give_way(
            short,
            stalled=_nothing_runs(running_batch),
            keep=request_key(head.rid),
            available=lambda: self._available_besides(node),
        )

    def _fits(self, req: Any, running_batch: Any) -> bool:
        """Whether SGLang would find room for ``req`` now (``_shortfall``); the tree is not
        searched when the free tokens alone hold its whole prompt (no pressure: every pass)."""
        extra = min(req.sampling_params.max_new_tokens or 0, CLIP_MAX_NEW_TOKENS)
        if running_batch is not None:
            extra += self.page_size * len(running_batch.reqs)
        tokens = len(req.origin_input_ids) + len(req.output_ids) + extra
        if tokens <= self._cache.token_to_kv_pool_allocator.available_size():
            return True
        return self._shortfall(req, running_batch)[0] <= 0

    def _shortfall(self, req: Any, running_batch: Any) -> tuple[int, Any]:
        """Tokens ``req`` lacks to be admitted now — its uncached tokens, its first decode
        reservation (as SGLang's PrefillAdder clips it) and a page per running request,
        beside the free plus evictable ones — and the tree node its cached prefix ends on.
        The tree is searched once per request a pass (``_needs``: giving way releases pins,
        which leaves their prefixes in the tree; only the free tokens change)."""
        key = request_key(req.rid)
        found = self._needs.get(key)
        if found is None:
            ids = array("q", req.origin_input_ids)
            ids.extend(req.output_ids)
            match = self._cache.match_prefix(
                MatchPrefixParams(key=RadixKey(ids, req.extra_key, cache_salt=req.cache_salt))
            )
            max_new = req.sampling_params.max_new_tokens or 0
            need = len(ids) - match.device_prefix_len + min(max_new, CLIP_MAX_NEW_TOKENS)
            if running_batch is not None:
                need += self.page_size * len(running_batch.reqs)
            found = self._needs[key] = (need, match.last_device_node)
        need, node = found
        return need - self._available_besides(node), node

    def _available_besides(self, node: Any) -> int:
        """Free plus evictable tokens once ``node``'s path is locked (admission locks the
        matched prefix, which then no longer counts as evictable)."""
        lock = self._cache.lock(node)
        available = (
            self._cache.token_to_kv_pool_allocator.available_size() + self._cache.evictable_size()
        )
        self._cache.unlock(lock)
        return available

    # -- pins ----------------------------------------------------------------------------------
    def expire(self) -> None:
        for pin in self.programs.expire(self._now()):
            if self.pins.release(pin.program_id):
                self.metrics.pin_gone(pin.program_id, "expired")

    def give_way(
        self,
        short_tokens: int,
        stalled: bool,
        keep: str | None = None,
        available: Callable[[], int] | None = None,
    ) -> None:
        """Release what ``ProgramLifecycle.give_way`` says gives way to ``short_tokens``:
        pins (latest-arrived program first), then, when ``stalled``, the prefixes held for
        waiting requests but ``keep``'s (they stay in the tree, evictable).  Each release is
        measured by ``available`` (default: the evictable tokens)."""
        if short_tokens <= 0:
            return
        page, measure = self.page_size, available or self._cache.evictable_size

        def release(program_id: str, request_id: str | None) -> int:
            before = measure()
            held = self.pins if request_id is None else self.handover
            if request_id is not None:
                if held.release(request_id):
                    self.metrics.reclaims += 1  # (a prefix held for a return already counted)
            elif held.release(program_id):
                self.metrics.pin_gone(program_id, "reclaimed")
            return (measure() - before) // page

        self.life.give_way(self._now(), math.ceil(short_tokens / page), release, stalled, keep)

    # -- the cache's events -------------------------------------------------------------------
    def finished(self, req: Any, node: Any, path_tokens: int) -> None:
        """``req`` finished and its checkpoint ended on ``node`` (``path_tokens`` from the
        root): the ProgramScheduler decides the pin; if pinned, ``node`` is locked."""
        key = request_key(req.rid)
        if key not in self._info:
            return  # not tracked (its program was ended by a sibling's abort)
        if isinstance(req.finished_reason, FINISH_ABORT):
            self._end_request(key)
            return
        self.expire()  # expired pins leave the budget before this one is decided
        now = self._now()
        if key in self._waiting:  # finished before the next pass saw it leave the queue
            self._start([key], now)
        info = self._info.pop(key)
        self._running.pop(key, None)
        self._hit(self.handover.release(key))
        if self.inferred is not None and self.inferred.tracks(key):  # a linked turn's end
            hashes = token_hashes(req.origin_input_ids, req.output_ids)
            prompt_blocks = len(req.origin_input_ids) // HASH_BLOCK_TOKENS
            self.inferred.finished(key, hashes, prompt_blocks, now)
        if info is None:
            self._ended(self.life.abort(key), key, program=False)
            return
        tool = info.tool if info.tool is not None else self._parse_tool(req)
        # What the host tier holds is a reload away, not a prefill: the pin is kept only when
        # it beats that reload.
        offloaded = min(path_tokens, self.host_tokens(node)) if self.host_tokens else 0
        miss_s = self.policy.miss_cost_s(path_tokens, offloaded)
        self.metrics.offloaded_tokens_at_finish += offloaded
        result = self.life.finish(
            key,
            now,
            self._blocks(path_tokens),
            tool=tool,
            last_turn=info.last_turn,
            cache_miss_cost_s=miss_s,
            prefix_tokens=path_tokens,
            offloaded_tokens=offloaded,
        )
        for gone in result.released:  # another tenant over its share gave budget back
            if self.pins.release(gone.program_id):
                self.metrics.pin_gone(gone.program_id, "reclaimed")
        if result.ended is not None:
            self._ended(result.ended, key)
        else:
            ttl_s = result.decision.ttl_s if result.decision is not None else None
            blocks = None
            if result.pin is not None:
                point = continuation_point(req.origin_input_ids)
                self.pins.hold(info.program_id, node, path_tokens, point)  # merged if held
                blocks = self._blocks(path_tokens)
            self.metrics.decided(info.program_id, now, ttl_s, blocks)
        if self.metrics.exporter is not None and not self._info:
            # idle: no pass publishes the last finishes until a request comes
            self.note_pinned()
            self.metrics.publish(force=True)

    def released(self, req: Any) -> None:
        """SGLang gave the request's KV row back.  A finished request not settled by
        ``finished`` (an abort, or one not inserted into the tree) ends its program without a
        pin; an unfinished one was retracted and shows up in the queue again."""
        if req.finished():
            self._end_request(request_key(req.rid))

    def aborted(self, rid: Any) -> None:
        """SGLang dropped a queued request (its client went away)."""
        self._end_request(request_key(rid))

    def _end_request(self, key: str) -> None:
        if key not in self._info:
            return
        info = self._info.pop(key)
        self._waiting.pop(key, None)
        self._running.pop(key, None)
        self.handover.release(key)
        self.metrics.gone(key)
        if self.inferred is not None:
            self.inferred.aborted(key, self._now())
        self._ended(self.life.abort(key), key, program=info is not None)

    def _ended(self, ended: Any, key: str, program: bool = True) -> None:
        """A program ended in the lifecycle (``key``: the request that ended it; ``program``:
        False for an anonymous one-request program): free its pin; its other live requests
        are no longer tracked there."""
        if program:
            self.metrics.ended(ended.program_id)
        if self.pins.release(ended.program_id):
            self.metrics.released_at_once += 1
        for sibling in ended.request_ids:
            if sibling == key or sibling not in self._info:
                continue
            # Waiting: forgotten here, so the next pass sees it arrive (a new program).
            # Running: its finish is skipped.
            del self._info[sibling]
            if self.inferred is not None:
                self.inferred.aborted(sibling, self._now())
            self._waiting.pop(sibling, None)
            self._running.pop(sibling, None)
            self.handover.release(sibling)

    def _parse_tool(self, req: Any) -> str | None:
        tokenizer = getattr(req, "tokenizer", None)
        if tokenizer is None:
            return None
        try:
            text = tokenizer.decode(list(req.output_ids[-TOOL_PARSE_TOKENS:]))
        except Exception:  # a tokenizer that cannot decode: no name, the global CDF
            return None
        return parse_tool_name(text) if isinstance(text, str) else None

    def _hit(self, held_tokens: int) -> None:
        """A request is admitted onto (or finished on) the prefix held for it."""
        if held_tokens:
            self.metrics.pinned_prefix_hits += 1
            self.metrics.pinned_prefix_hit_tokens += held_tokens

    def note_pinned(self) -> None:
        """Refresh the pinned-blocks gauge (pages on the locked paths) and pinned programs."""
        self.metrics.pinned_blocks_now = self._blocks(self.pins.held_tokens())
        self.metrics.pinned_programs_now = self.programs.pin_count

    # -- views ---------------------------------------------------------------------------------
    def live_requests(self) -> int:
        return len(self._info)


def _nothing_runs(running_batch: Any) -> bool:
    """SGLang's running batch is empty (None: not known, as when a caller passes none)."""
    return running_batch is not None and not running_batch.reqs
