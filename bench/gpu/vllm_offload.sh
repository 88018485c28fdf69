#!/usr/bin/env bash
# vLLM (GPU build) with the OffloadingConnector's CPU tier under each policy — vLLM's lru and
# arc, and ttlpolicy's TTLCachePolicy (by module path) — replaying the shipped agentic
# sessions on a random-weight Llama-3.1-8B-shaped model.  Prints, per policy: requests, wall
# seconds, prefix tokens served from cache (GPU + CPU tier), and the tier's counters.
# Needs an NVIDIA GPU (refuses clearly without one) and vLLM 0.32.x (CUDA build) importable by
# $PYTHON (default: python3) with ttlpolicy and ttlpolicy-vllm installed.  Target: < 8 min.
# Usage: bash bench/gpu/vllm_offload.sh [max_requests (default 120)] [cpu_gib (default 8)]
set -euo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "vllm_offload.sh: refusing to run: no NVIDIA GPU found (nvidia-smi lists none)." >&2
  echo "It benchmarks vLLM's GPU offloading connector and cannot run on CPU." >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
MAX_REQUESTS="${1:-120}"
CPU_GIB="${2:-8}"
export VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1 VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}"
cd "$ROOT"
export PYTHONPATH="$ROOT/bench${PYTHONPATH:+:$PYTHONPATH}"  # (vllm_offload_replay, beside it)
for policy in lru arc TTLCachePolicy; do
  timeout 150 "$PYTHON" - "$policy" "$MAX_REQUESTS" "$CPU_GIB" <<'PY'
import json, sys, tempfile, time
from pathlib import Path

policy, max_requests, cpu_gib = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
from vllm import LLM, SamplingParams
from ttlpolicy.traces import sample_dir
from vllm_offload_replay import agentic_stream, iter_sessions

# Llama-3.1-8B's shape, random weights (load_format="dummy"): no weights leave any hub.
model = Path(tempfile.mkdtemp(prefix="llama8b-shape-"))
(model / "config.json").write_text(json.dumps({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}))
extra = {"cpu_bytes_to_use": int(cpu_gib * 2**30), "eviction_policy": policy}
if policy == "TTLCachePolicy":
    extra["cache_policy_module_path"] = "ttlpolicy_vllm.offload"
llm = LLM(model=str(model), load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
          max_model_len=32768, gpu_memory_utilization=0.5, enable_prefix_caching=True,
          scheduler_cls="ttlpolicy_vllm.TTLScheduler",
          kv_transfer_config={"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                              "kv_connector_extra_config": extra})
BLOCK = 64  # tokens per trace hash id: each id becomes 64 deterministic token ids
def tokens(hash_ids):
    out = []
    for h in hash_ids[: 32000 // BLOCK]:
        out.extend((h * 2654435761 + i * 40503) % 128000 + 100 for i in range(BLOCK))
    return out
stream = agentic_stream(iter_sessions(sample_dir()), mean_gap_s=60.0)[:max_requests]
t0, cached, prompt_tokens = time.perf_counter(), 0, 0
for a in stream:
    session = a.request_id.split("-")[0]
    params = SamplingParams(max_tokens=16, ignore_eos=True, extra_args={
        "program_id": session, "tool": "bash", "last_turn": a.last_turn})
    out = llm.generate([{"prompt_token_ids": tokens(a.hash_ids)}], params, use_tqdm=False)[0]
    cached += out.num_cached_tokens or 0
    prompt_tokens += len(out.prompt_token_ids)
wall = time.perf_counter() - t0
sched = llm.llm_engine.engine_core.engine_core.scheduler if hasattr(
    llm.llm_engine.engine_core, "engine_core") else None
stats = sched.ttl_stats() if sched is not None else {}
print(json.dumps({"policy": policy, "requests": len(stream), "wall_s": round(wall, 1),
                  "prompt_tokens": prompt_tokens, "cached_tokens": cached,
                  "cached_share": round(cached / max(1, prompt_tokens), 4),
                  "offloaded_tokens_at_finish": stats.get("offloaded_tokens_at_finish")}))
PY
done
