"""Real SGLang 0.5.23 cache and scheduling code on CPU, for the adapter's tests and bench/.

No model runs: a request's KV slots come from SGLang's own pools and allocator
(``ReqToTokenPool``, ``MHATokenToKVPool``, ``TokenToKVPoolAllocator`` on CPU), the tree is built
by SGLang's own ``create_tree_cache`` (``--radix-cache-backend ttlpolicy`` or the stock chain),
the waiting queue is sorted by SGLang's ``SchedulePolicy.calc_priority`` (wrapped by the
adapter's hook, as the plug-in wraps it), and requests go through the scheduler's cache calls
in its order: ``match_kv_cache`` and ``lock`` at admission, ``alloc_req_slots`` and
``alloc_token_slots`` (which evict through the tree), ``release_kv_cache`` at the end, and
``tree_cache.finish(..., ABORT)`` for a queued abort.  ``MiniScheduler`` only stands in for the
model forward (it appends output tokens) and for the PrefillAdder's admission test (the head is
admitted while its uncached tokens fit into free plus evictable tokens).
"""

from __future__ import annotations

import os

os.environ.setdefault("TTLPOLICY_LOG_INTERVAL_S", "0")

import torch

if torch.version.cuda is None:
    # A CPU-only torch: PyPI's torchvision is a CUDA build whose C ops fail to register, and
    # sglang imports torchvision.transforms unconditionally.  Declaring the two op schemas its
    # Python side looks up lets the pure-Python parts import (shared/notes/sglang-on-cpu.md).
    _tv = torch.library.Library("torchvision", "FRAGMENT")
    _tv.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _tv.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

from array import array
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_MATCHED_TOKEN, Req
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.mem_cache.allocation import alloc_req_slots, alloc_token_slots
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestOutcome
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import match_kv_cache, release_kv_cache
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from ttlpolicy_sglang.ordering import calc_priority_by_program, may_admit

#: A policy that pins whenever the budget allows: an expensive cache miss, short tool calls.
TEST_POLICY = (
    '{"prefill_base_s": 100.0, "prior_mean_s": 1.0, "max_ttl_s": 30.0,'
    ' "min_prefill_samples": 1048576}'
)
MAX_CONTEXT = 2048


class FakeClock:
    """The adapter's clock, moved by the test (pins expire when the test says so)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def build_cache(kv_tokens: int, backend: str | None, max_reqs: int = 64) -> Any:
    """The tree cache SGLang's scheduler would build for ``--radix-cache-backend backend``
    (None: the stock selection), over real CPU pools of ``kv_tokens`` tokens."""
    set_global_server_args_for_scheduler(
        ServerArgs(model_path="dummy", radix_cache_backend=backend)
    )
    req_to_token_pool = ReqToTokenPool(
        size=max_reqs, max_context_len=MAX_CONTEXT, device="cpu", enable_memory_saver=False
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
    )
    ctx = TreeCacheBuildContext(
        server_args=ServerArgs(model_path="dummy"),
        params=params,
        is_hybrid_swa=False,
        is_hybrid_ssm=False,
        enable_hierarchical_cache=False,
        disable_radix_cache=False,
        tp_worker=None,
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
        the admitted requests."""
        self.order()
        admitted = []
        # the load-control gate first, as the plug-in's hook on PrefillAdder.add_one_req
        while (
            self.waiting and may_admit(self.cache, self.waiting[0]) and self._admit(self.waiting[0])
        ):
            admitted.append(self.waiting.pop(0))
        return admitted

    def _admit(self, req: Any) -> bool:
        # What PrefillAdder and alloc_for_extend do for one request (page size 1): match and
        # lock the prefix, then the uncached tokens must fit into free plus evictable tokens
        # (the locked prefix no longer counts as evictable).
        req.init_next_round_input(self.cache)
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
        req.kv.kv_committed_len = req.kv.kv_allocated_len = fill
        req.extend_end = fill
        self.running[req.rid] = req
        return True

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


def make_scheduler(kv_tokens: int, backend: str | None, clock: FakeClock | None) -> Any:
    cache = build_cache(kv_tokens, backend)
    if clock is not None:
        cache.ttl.clock = clock
    policy = SchedulePolicy(
        "fcfs",
        cache,
        enable_hierarchical_cache=False,
        enable_priority_scheduling=False,
        schedule_low_priority_values_first=False,
    )
    return MiniScheduler(cache, policy)


def tokens(start: int, n: int) -> list[int]:
    """``n`` distinct token ids from ``start`` (distinct ranges never share a prefix)."""
    return list(range(start, start + n))
