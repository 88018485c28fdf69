"""Real SGLang 0.5.23 cache and scheduling code on CPU, for the adapter's tests and bench/.

No model runs: a request's KV slots come from SGLang's own pools and allocator
(``ReqToTokenPool``, ``MHATokenToKVPool``, ``TokenToKVPoolAllocator`` on CPU), the tree is built
by SGLang's own ``create_tree_cache`` (``--radix-cache-backend ttlpolicy`` or the stock chain),
the waiting queue is sorted by SGLang's ``SchedulePolicy.calc_priority`` (wrapped by the
adapter's hook, as the plug-in wraps it), and requests go through the scheduler's cache calls
in its order: ``match_kv_cache`` and ``lock`` at admission, ``alloc_req_slots`` and
``alloc_token_slots`` (which evict through the tree), ``release_kv_cache`` at the end, and
``tree_cache.finish(..., ABORT)`` for a queued abort.

With a host pool (``host_ratio``: ``--enable-hierarchical-cache --hicache-ratio``), SGLang's own
HiCache runs too: ``create_tree_cache`` calls ``init_hicache``, which builds the real host pool
(``MHATokenToKVPoolHost``) and ``HybridCacheController``; the scheduler's step polls
``check_hicache_events`` (write-through backups, their acks), admission loads host hits back
through ``init_load_back``, and the tree's own eviction demotes to the host and evicts host
leaves (``evict_host`` → ``drive_host_eviction``).  Two CUDA-only calls are replaced, nothing
else: ``pool_host.mha.transfer_kv_direct`` (the ``direct`` io backend's copy, an sgl_kernel
op) by the same indexed copy in torch, and ``pool_host.common._cuda_host_register`` (page-locking
the host buffer) by nothing: on CPU the buffer stays pageable.

``MiniScheduler`` only stands in for the model forward (it appends output tokens) and for the
PrefillAdder's admission test (the head is admitted while its uncached tokens fit into free
plus evictable tokens).
"""

from __future__ import annotations

import atexit
import os

os.environ.setdefault("TTLPOLICY_LOG_INTERVAL_S", "0")

import torch

if torch.version.cuda is None:
    # A CPU-only torch: PyPI's torchvision is a CUDA build whose C ops fail to register, and
    # sglang imports torchvision.transforms unconditionally.  Declaring the two op schemas its
    # Python side looks up lets the pure-Python parts import (docs/sglang.md, "On a CPU").
    _tv = torch.library.Library("torchvision", "FRAGMENT")
    _tv.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _tv.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

from array import array
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import sglang.srt.mem_cache.pool_host.common as _host_common
import sglang.srt.mem_cache.pool_host.mha as _host_mha
from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_MATCHED_TOKEN, Req
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.mem_cache.allocation import alloc_req_slots, alloc_token_slots
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestOutcome, InitLoadBackParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import match_kv_cache, release_kv_cache
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from ttlpolicy_sglang.ordering import calc_priority_by_program, may_admit

from engine_fixtures import TEST_POLICY, FakeClock  # noqa: F401  (the tests import them here)


def _transfer_kv_direct(
    src_layers: list[Any], dst_layers: list[Any], src_indices: Any, dst_indices: Any, page_size: int
) -> None:
    """sgl_kernel's ``transfer_kv_direct`` (host↔device copy of KV rows, both directions) as
    the indexed copy it performs."""
    del page_size  # rows are token slots either way
    for src, dst in zip(src_layers, dst_layers, strict=True):
        dst[dst_indices.to(dst.device)] = src[src_indices.to(src.device)]


def _no_page_lock(buffer: Any, granularity_bytes: Any = None) -> None:
    """``_cuda_host_register`` without a CUDA driver: the host buffer stays pageable."""


if torch.version.cuda is None or not torch.cuda.is_available():
    _host_mha.transfer_kv_direct = _transfer_kv_direct
    _host_common._cuda_host_register = _no_page_lock

MAX_CONTEXT = 2048


def build_cache(
    kv_tokens: int,
    backend: str | None,
    max_reqs: int = 64,
    host_ratio: float | None = None,
    eviction_policy: str = "lru",
    max_context: int = MAX_CONTEXT,
    enable_metrics: bool = False,
) -> Any:
    """The tree cache SGLang's scheduler would build for ``--radix-cache-backend backend``
    (None: the stock selection), over real CPU pools of ``kv_tokens`` tokens; with
    ``host_ratio``, HiCache on (``--enable-hierarchical-cache --hicache-ratio host_ratio``,
    write-through, the ``direct`` io backend), ``eviction_policy`` its
    ``--radix-eviction-policy`` and ``enable_metrics`` its ``--enable-metrics`` (the
    scheduler's ``build_kv_cache`` passes it in the cache's parameters)."""
    hicache: dict[str, Any] = {}
    if host_ratio is not None:
        hicache = dict(
            enable_hierarchical_cache=True,
            hicache_ratio=host_ratio,
            hicache_size=0,
            hicache_io_backend="direct",
            hicache_mem_layout="layer_first",
            hicache_write_policy="write_through",
        )
    server_args = ServerArgs(
        model_path="dummy",
        radix_cache_backend=backend,
        radix_eviction_policy=eviction_policy,
        **hicache,
    )
    set_global_server_args_for_scheduler(server_args)
    req_to_token_pool = ReqToTokenPool(
        size=max_reqs, max_context_len=max_context, device="cpu", enable_memory_saver=False
    )
    kv_pool = MHATokenToKVPool(
        size=kv_tokens,
        page_size=1,
        dtype=torch.bfloat16,
        head_num=1,
        head_dim=8,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
    )
    allocator = TokenToKVPoolAllocator(
        size=kv_tokens, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool, need_sort=False
    )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=1,
        eviction_policy=eviction_policy,
        enable_metrics=enable_metrics,
    )
    ctx = TreeCacheBuildContext(
        server_args=server_args,
        params=params,
        is_hybrid_swa=False,
        is_hybrid_ssm=False,
        enable_hierarchical_cache=host_ratio is not None,
        disable_radix_cache=False,
        # what init_hicache's caller registers the layer-done counter with
        tp_worker=SimpleNamespace(register_hicache_layer_transfer_counter=lambda counter: None),
        model_config=None,
        tp_size=1,
        tp_rank=0,
        tp_group=None,
    )
    return create_tree_cache(ctx)


@dataclass
class MiniScheduler:
    """SGLang's scheduler loop around a real tree cache, minus the model."""

    cache: Any
    policy: Any
    waiting: list[Any] = field(default_factory=list)
    running: dict[str, Any] = field(default_factory=dict)
    counter: int = 0
    host_loaded_tokens: int = 0  # tokens loaded back from the host pool at admission

    @property
    def ttl(self) -> Any:
        return self.cache.ttl

    def submit(
        self,
        tokens: list[int],
        *,
        program: str | None = None,
        tool: str | None = None,
        last_turn: bool = False,
        max_new_tokens: int = 8,
        rid: str | None = None,
        **fields: Any,
    ) -> Any:
        custom: dict[str, Any] = {}
        if program is not None:
            custom["program_id"] = program
        if tool is not None:
            custom["tool"] = tool
        if last_turn:
            custom["last_turn"] = True
        self.counter += 1
        req = Req(
            rid=rid or f"r{self.counter}",
            origin_input_text="",
            origin_input_ids=array("q", tokens),
            sampling_params=SamplingParams(
                temperature=0, max_new_tokens=max_new_tokens, custom_params=custom or None
            ),
            **fields,
        )
        self.waiting.append(req)
        return req

    def order(self) -> None:
        """One pass of SGLang's calc_priority, through the adapter's hook (as the plug-in
        installs it): stock order when the cache is not the adapter's."""
        running_batch = SimpleNamespace(reqs=list(self.running.values()))  # what it reads
        calc_priority_by_program(
            SchedulePolicy.calc_priority, self.policy, self.waiting, running_batch
        )

    def schedule(self) -> list[Any]:
        """Order the queue, then admit from its head while requests fit and load control
        lets their programs start (PrefillAdder stops at the first that does not).  Returns
        the admitted requests.  With HiCache, the step first polls its events (the
        scheduler's ``check_hicache_events``: backup acks)."""
        self.poll()
        self.order()
        admitted = []
        # the load-control gate first, as the plug-in's hook on PrefillAdder.add_one_req
        while (
            self.waiting and may_admit(self.cache, self.waiting[0]) and self._admit(self.waiting[0])
        ):
            admitted.append(self.waiting.pop(0))
        return admitted

    def poll(self) -> None:
        """The scheduler's per-step ``check_hicache_events`` (HiCache only): pending backups
        start, finished ones (on CPU: at once) are acknowledged and unlock their nodes."""
        if self.cache.cache_controller is not None:
            self.cache.check_hicache_events()

    def _admit(self, req: Any) -> bool:
        # What PrefillAdder and alloc_for_extend do for one request (page size 1): match and
        # lock the prefix, then the uncached tokens must fit into free plus evictable tokens
        # (the locked prefix no longer counts as evictable).
        req.init_next_round_input(self.cache)
        if req.host_hit_length > 0 and self.cache.cache_controller is not None:
            self._load_back(req)
        req.lock = self.cache.lock(req.last_node)
        fill = len(req.full_untruncated_fill_ids)
        allocator = self.cache.token_to_kv_pool_allocator
        if fill - req.prefix_len > allocator.available_size() + self.cache.evictable_size():
            self.cache.unlock(req.lock)
            req.lock = None
            return False
        prefix = self.cache.prefix_device_indices(req) if req.prefix_len else None
        alloc_req_slots(self.cache.req_to_token_pool, [req], self.cache)
        new = alloc_token_slots(self.cache, fill - req.prefix_len)
        row = req.kv.req_pool_idx
        if prefix is not None:
            self.cache.req_to_token_pool.write((row, slice(0, req.prefix_len)), prefix)
        self.cache.req_to_token_pool.write((row, slice(req.prefix_len, fill)), new)
        req.kv.cache_protected_len = req.prefix_len
        if not req.retracted_stain:  # ScheduleBatch.prepare_for_extend's count (usage's)
            req.cached_tokens += req.prefix_len - req.already_computed
            req.already_computed = fill
        req.kv.kv_committed_len = req.kv.kv_allocated_len = fill
        req.extend_end = fill
        self.running[req.rid] = req
        return True

    def _load_back(self, req: Any) -> None:
        """PrefillAdder's load of a host hit (``init_load_back``), then the scheduler's wait for
        it (``ready_to_load_host_cache``, the transfer's event, ``loading_check``)."""
        loaded = self.cache.init_load_back(
            InitLoadBackParams(
                best_match_node=req.best_match_node, host_hit_length=req.host_hit_length, req=req
            )
        )
        req.host_loaded_length, req.last_node = loaded
        req.prefix_len += req.host_loaded_length
        self.host_loaded_tokens += req.host_loaded_length
        if req.host_loaded_length:
            self.cache.ready_to_load_host_cache()
            for ack in list(self.cache.cache_controller.ack_load_queue):
                ack.finish_event.synchronize()
            self.cache.loading_check()

    def decode(self, req: Any, tokens: list[int]) -> None:
        """The model emits ``tokens`` (their KV slots are allocated as a decode step would)."""
        locs = alloc_token_slots(self.cache, len(tokens))
        start = req.kv.kv_committed_len
        self.cache.req_to_token_pool.write(
            (req.kv.req_pool_idx, slice(start, start + len(tokens))), locs
        )
        req.output_ids.extend(tokens)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = start + len(tokens)

    def finish(self, req: Any, tokens: list[int]) -> None:
        """The turn ends after ``tokens``: SGLang's release of a finished request."""
        self.decode(req, tokens)
        req.finished_reason = FINISH_MATCHED_TOKEN(matched=tokens[-1])
        del self.running[req.rid]
        release_kv_cache(req, self.cache, checkpoint=True)
        self.poll()  # (the next step's first call: its write-through backup is done)

    def retract(self, req: Any) -> None:
        """SGLang's retraction of a decoding request (``ScheduleBatch.retract_decode`` →
        ``release_req``): its KV freed, not inserted, and the request back in the queue."""
        del self.running[req.rid]
        release_kv_cache(req, self.cache, checkpoint=False)
        req.reset_for_retract()
        self.waiting.insert(0, req)

    def abort_running(self, req: Any) -> None:
        req.finished_reason = FINISH_ABORT()
        del self.running[req.rid]
        release_kv_cache(req, self.cache, checkpoint=False)

    def abort_waiting(self, req: Any) -> None:
        """Scheduler.abort_request for a queued request: pop it, tell the cache."""
        self.waiting.remove(req)
        self.cache.finish(req.cache_request_handle, CacheRequestOutcome.ABORT)

    def hit_tokens(self, tokens: list[int]) -> int:
        """How many leading tokens of ``tokens`` the tree holds now."""
        probe = Req(
            rid="probe",
            origin_input_text="",
            origin_input_ids=array("q", tokens),
            sampling_params=SamplingParams(max_new_tokens=1),
        )
        return match_kv_cache(probe, self.cache).device_prefix_len


def make_scheduler(
    kv_tokens: int,
    backend: str | None,
    clock: FakeClock | None,
    host_ratio: float | None = None,
    eviction_policy: str = "lru",
    max_context: int = MAX_CONTEXT,
    enable_metrics: bool = False,
) -> Any:
    cache = build_cache(
        kv_tokens,
        backend,
        host_ratio=host_ratio,
        eviction_policy=eviction_policy,
        max_context=max_context,
        enable_metrics=enable_metrics,
    )
    if clock is not None:
        cache.ttl.clock = clock
    if host_ratio is not None:
        atexit.unregister(cache.shutdown)  # init_hicache's: the controller's threads end with it
    policy = SchedulePolicy(
        "fcfs",
        cache,
        enable_hierarchical_cache=host_ratio is not None,
        enable_priority_scheduling=False,
        schedule_low_priority_values_first=False,
    )
    return MiniScheduler(cache, policy)


def tokens(start: int, n: int) -> list[int]:
    """``n`` distinct token ids from ``start`` (distinct ranges never share a prefix)."""
    return list(range(start, start + n))
