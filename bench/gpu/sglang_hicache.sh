#!/usr/bin/env bash
# SGLang's host tier (HiCache) on a real GPU: bench/gpu/sglang_serve.sh (stock vs
# `--radix-cache-backend ttlpolicy`, the sample agentic sessions over HTTP) with
# `--enable-hierarchical-cache` on, so evicted turns are written to the host pool and loaded
# back through SGLang's own transfer kernels (`--hicache-io-backend kernel`), the path the CPU
# tests replace by a torch copy (bench/sglang_engine.py).  The KV pool is kept small
# (--mem-fraction-static 0.05) so that the device overflows and the host tier decides hits.
# Prints what sglang_serve.sh prints, per backend; with ttlpolicy the host tier is ordered by
# the library (adapters/sglang/README.md, "HiCache").
#
# Needs an NVIDIA GPU: sglang_serve.sh refuses otherwise, before installing anything.
# Usage: bash bench/gpu/sglang_hicache.sh [sglang_serve.sh's arguments]
#        (environment: HICACHE_RATIO, host pool over KV pool, default 2;
#        TTLPOLICY_OFFLOAD, the host tier's prices, as in docs/sglang.md)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

export SGLANG_SERVER_ARGS="--enable-hierarchical-cache --hicache-ratio ${HICACHE_RATIO:-2}
  --hicache-write-policy write_through --hicache-io-backend kernel --mem-fraction-static 0.05"  # (the later of two flags wins)
exec bash "$ROOT/bench/gpu/sglang_serve.sh" "$@"
