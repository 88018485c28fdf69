"""A real vLLM engine on CPU for the adapter's tests and ``bench/vllm_replay.py``: a tiny
random Llama and a byte-level BPE tokenizer, both made locally (no hub access), and helpers
that drive the engine step by step so a caller can stop between a program's turns.

Import this module before anything imports vllm: it sets vLLM's environment (engine core in
this process, offline, a temporary cache) and vLLM reads some of it at import time.
"""

from __future__ import annotations

import os
import sys
import tempfile

# vLLM reads these at import time: set them before anything imports vllm.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="ttlpolicy-vllm-cache-"))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TTLPOLICY_LOG_INTERVAL_S", "0")

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_fixtures import TEST_POLICY, FakeClock  # noqa: F401  (the tests import them here)

if "vllm" in sys.modules:  # too late: vLLM has read its environment already
    raise RuntimeError("import vllm_engine (bench/) before vllm: it sets vLLM's environment")

BLOCK = 32  # tokens per KV block (CPU attention wants a multiple of 32)
CORPUS = [
    "the agent reads the file and calls a tool",
    "bash: ls -la; cat README.md; pytest -q",
    "KV cache blocks are pinned until the tool returns",
    "program level first come first served scheduling",
    '<tool_call> {"name": "search", "arguments": {}} </tool_call>',
] * 20


def save_tokenizer(path: Path) -> Any:
    """A byte-level BPE tokenizer trained locally on ``CORPUS`` (no hub), saved to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    return fast


def build_tiny_model(path: Path) -> Path:
    """A 2-layer random Llama (head_dim 32) with a locally trained byte-level BPE tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = save_tokenizer(path)
    vocab = len(fast)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(path)
    return path


@dataclass
class Engine:
    llm: Any
    clock: FakeClock | None
    counter: int = 0
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def core(self) -> Any:
        return self.llm.llm_engine.engine_core.engine_core

    @property
    def scheduler(self) -> Any:
        return self.core.scheduler

    def submit(
        self,
        prompt: list[int],
        max_tokens: int,
        rid: str | None = None,
        cache_salt: str | None = None,
        **xargs: Any,
    ) -> str:
        """Queue a request (``xargs``: its ``vllm_xargs``; ``cache_salt``: its tenant's salt,
        as a gateway sets it); returns its id."""
        from vllm import SamplingParams

        if rid is None:
            self.counter += 1
            rid = f"r{self.counter:06d}"  # ids sort in submission order
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0,
            ignore_eos=True,
            extra_args=xargs or None,
        )
        inputs: dict[str, Any] = {"prompt_token_ids": prompt}
        if cache_salt is not None:
            inputs["cache_salt"] = cache_salt
        self.llm.llm_engine.add_request(rid, inputs, params)
        return rid

    def run(self, max_steps: int = 10_000) -> None:
        """Step until every submitted request is finished."""
        engine = self.llm.llm_engine
        for _ in range(max_steps):
            if not engine.has_unfinished_requests():
                return
            for out in engine.step():
                if out.finished:
                    self.outputs[out.request_id] = out
        raise AssertionError("engine did not finish")

    def step(self) -> None:
        for out in self.llm.llm_engine.step():
            if out.finished:
                self.outputs[out.request_id] = out

    def turn(self, prompt: list[int], max_tokens: int, **xargs: Any) -> Any:
        """Run one request to completion; its RequestOutput."""
        rid = self.submit(prompt, max_tokens, **xargs)
        self.run()
        return self.outputs[rid]

    def abort(self, rid: str) -> None:
        self.llm.llm_engine.abort_request([rid])

    def free_blocks(self) -> int:
        return self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()


#: The tiny engine's settings (vLLM engine arguments), besides the model, its KV blocks and
#: scheduler: one place for ``make_engine`` and the Ray adapter's vLLM replicas.
TINY_ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "block_size": BLOCK,
    "max_model_len": 512,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 512,
    "enforce_eager": True,
    "enable_prefix_caching": True,
    "seed": 0,
}


def make_engine(model: Path, scheduler_cls: Any, num_blocks: int, clock: bool = True) -> Engine:
    from vllm import LLM

    llm = LLM(
        model=str(model),
        tokenizer=str(model),
        num_gpu_blocks_override=num_blocks,
        scheduler_cls=scheduler_cls,
        **TINY_ENGINE_ARGS,
    )
    engine = Engine(llm, FakeClock() if clock else None)
    if clock and hasattr(engine.scheduler, "clock"):
        engine.scheduler.clock = engine.clock
    return engine
