#!/usr/bin/env bash
# A real SGLang 0.5.23 server on an NVIDIA GPU, stock vs `--radix-cache-backend ttlpolicy`:
# random weights (--load-format dummy) of a small Llama config written here (no hub access),
# and agentic sessions replayed over HTTP (/generate with input ids), the sample traces shipped
# with ttlpolicy (ttlpolicy.traces.sample_dir()), contexts scaled to --max-context tokens and
# tool times to --time-scale.  Each request names its program and tool in custom_params
# (adapters/sglang/README.md).  Prints, per backend, mean/p90 program completion time and the
# prefix-cache hit rate (cached_tokens over prompt tokens, from SGLang's meta_info).
#
# Needs an NVIDIA GPU and the full `pip install sglang==0.5.23` (CUDA); refuses otherwise.
# Usage: bash bench/gpu/sglang_serve.sh [--programs N] [--turns N] [--max-context N]
#        (environment: SGLANG_GPU_VENV, a venv to build or reuse; PORT, default 30123;
#        SGLANG_SERVER_ARGS, more server flags for both backends, as bench/gpu/sglang_hicache.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "bench/gpu/sglang_serve.sh: needs an NVIDIA GPU (nvidia-smi lists none here); refusing." >&2
  echo "The adapter's CPU tests are bash scripts/test.sh; the CPU overhead bench is bench/sglang_overhead.py." >&2
  exit 2
fi

PROGRAMS=16 TURNS=8 MAX_CONTEXT=6000
while [ $# -gt 0 ]; do
  case "$1" in
    --programs) PROGRAMS=$2; shift 2 ;;
    --turns) TURNS=$2; shift 2 ;;
    --max-context) MAX_CONTEXT=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
PORT="${PORT:-30123}"
VENV="${SGLANG_GPU_VENV:-$HOME/.cache/ttlpolicy/venv-sglang-gpu}"
source "$ROOT/scripts/venv.sh"
install_gpu() {
  "$1/bin/python" -m pip install -q "sglang==0.5.23" "maturin==1.16.0"
}
cached_venv "$VENV" install_gpu
export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
(cd "$ROOT" && maturin develop --release --quiet >/dev/null)
python -m pip install -q --no-deps --no-build-isolation -e "$ROOT/adapters/sglang"

WORK=$(mktemp -d)
trap 'kill "${SERVER:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
python - "$WORK/model" <<'PY'
import sys
from transformers import LlamaConfig
LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
            num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=16384,
            torch_dtype="bfloat16").save_pretrained(sys.argv[1])
PY

for backend in stock ttlpolicy; do
  extra=()
  [ "$backend" = ttlpolicy ] && extra=(--radix-cache-backend ttlpolicy)
  python -m sglang.launch_server --model-path "$WORK/model" --load-format dummy \
    --skip-tokenizer-init --port "$PORT" --mem-fraction-static 0.2 \
    --context-length 16384 "${extra[@]}" ${SGLANG_SERVER_ARGS:-} >"$WORK/server-$backend.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    kill -0 "$SERVER" 2>/dev/null || { tail -50 "$WORK/server-$backend.log" >&2; exit 1; }
    sleep 1
  done
  python - "$backend" "$PORT" "$PROGRAMS" "$TURNS" "$MAX_CONTEXT" <<'PY'
import json, random, statistics, sys, threading, time
import requests
from ttlpolicy.traces import read_agentic, sample_dir

backend, port, n, turns, max_ctx = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:])
sessions = []
for path in sorted(sample_dir().glob("trace_*.json.gz")):
    recs = [r for r in read_agentic(path) if "/" not in r.session_id][:turns]
    if len(recs) == turns:
        sessions.append(recs)
    if len(sessions) == n:
        break
stats = {"prompt": 0, "cached": 0, "done": []}
lock = threading.Lock()

def program(i, recs):
    rng = random.Random(i)
    scale = max_ctx / max(r.input_tokens + r.output_tokens for r in recs)
    ctx, t0 = [], time.monotonic()
    for k, r in enumerate(recs):
        if k:
            time.sleep(min(30.0, r.think_time_s * 0.1))
        target = max(int(r.input_tokens * scale), len(ctx) + 8)
        ctx += [rng.randrange(3, 32000) for _ in range(target - len(ctx))]
        out = max(1, min(256, int(r.output_tokens * scale)))
        custom = {"program_id": f"prog{i}", "tool": "bash", "last_turn": k == len(recs) - 1}
        body = {"input_ids": ctx, "sampling_params": {"max_new_tokens": out, "ignore_eos": True,
                "temperature": 0.0, "custom_params": custom}}
        res = requests.post(f"http://127.0.0.1:{port}/generate", json=body, timeout=600).json()
        ctx += res["output_ids"]
        with lock:
            stats["prompt"] += res["meta_info"]["prompt_tokens"]
            stats["cached"] += res["meta_info"].get("cached_tokens", 0)
    with lock:
        stats["done"].append(time.monotonic() - t0)

threads = [threading.Thread(target=program, args=(i, s)) for i, s in enumerate(sessions)]
for t in threads: t.start()
for t in threads: t.join()
done = sorted(stats["done"])
print(json.dumps({"backend": backend, "programs": len(done),
                  "completion_s_mean": statistics.fmean(done),
                  "completion_s_p90": done[int(0.9 * (len(done) - 1))],
                  "hit_rate": stats["cached"] / max(1, stats["prompt"])}))
PY
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
  SERVER=
done
