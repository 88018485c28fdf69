#!/usr/bin/env bash
# Simulator fidelity on an NVIDIA GPU: a Llama-3.1-8B-shaped model with random weights on real
# vLLM (stock Scheduler and ttlpolicy_vllm.TTLScheduler) against ttlpolicy.sim configured with
# a profile calibrated on the same engine.  Budget: < 8 minutes including installation.
#
#   bash bench/gpu/fidelity.sh            # writes $FIDELITY_OUT (default bench/gpu/out/)
#
# Steps: refuse without a GPU (exit 3, before anything is installed or written); a venv with
# the CUDA build of the vLLM version the adapter is pinned to (cached under ~/.cache, uv when
# present); ttlpolicy and the adapter from this checkout on PYTHONPATH (pure-Python backend:
# no Rust toolchain needed); the model is a config.json written locally and
# load_format="dummy" (no weights downloaded); calibrate; replay; JSON + log in the out dir.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "bench/gpu/fidelity.sh: needs an NVIDIA GPU (nvidia-smi lists none here);" \
    "nothing was installed or written" >&2
  exit 3
fi
OUT="${FIDELITY_OUT:-$ROOT/bench/gpu/out}"
mkdir -p "$OUT"
LOG="$OUT/fidelity.log"
exec > >(tee "$LOG") 2>&1
start=$(date +%s)
VLLM_GPU_PIN="vllm==0.32.0"  # the version adapters/vllm is tested against (CPU build there)
VENV="${FIDELITY_VENV:-$HOME/.cache/ttlpolicy/venv-vllm-gpu-0.32.0}"
if [ ! -f "$VENV/.complete" ]; then
  echo "==> installing $VLLM_GPU_PIN into $VENV"
  python3 -m venv "$VENV"
  if command -v uv >/dev/null 2>&1; then
    uv pip install --python "$VENV/bin/python" -q "$VLLM_GPU_PIN"
  else
    "$VENV/bin/python" -m pip install -q "$VLLM_GPU_PIN"
  fi
  touch "$VENV/.complete"
fi
echo "==> installed after $(($(date +%s) - start)) s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
export PYTHONPATH="$ROOT/python:$ROOT/adapters/vllm/src${PYTHONPATH:+:$PYTHONPATH}"
export TTLPOLICY_BACKEND=python TTLPOLICY_TRACES="${TTLPOLICY_TRACES:-$ROOT/../shared/traces}"
PY="$VENV/bin/python"
# Realistic agentic contexts (up to 16k tokens), a KV cache of 2000 blocks of 16 tokens so
# that programs compete for it, 16 programs of 8 turns.
SHAPE=(--shape llama-3.1-8b --device cuda --block-size 16 --max-model-len 20000)
"$PY" "$ROOT/bench/vllm_calibrate.py" "${SHAPE[@]}" --out "$OUT/profile.json"
echo "==> calibrated after $(($(date +%s) - start)) s"
"$PY" "$ROOT/bench/fidelity.py" "${SHAPE[@]}" --profile "$OUT/profile.json" \
  --programs 16 --turns 8 --max-context 16000 --max-out 128 --blocks 2000 \
  --token-budget 8192 --max-seqs 64 --time-scale 0.05 --max-gap-s 5 \
  --json "$OUT/fidelity.json"
echo "==> done in $(($(date +%s) - start)) s; $OUT/fidelity.json, $LOG"
