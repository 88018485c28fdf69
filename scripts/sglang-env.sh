#!/usr/bin/env bash
# Sourced by scripts/test.sh (or run alone): the environment of the SGLang adapter's tests.
#
# A virtual environment with real SGLang 0.5.23 cached under ~/.cache, keyed by the hash of
# requirements/sglang.txt: a fresh machine builds it (a few minutes, ~6 GB: PyPI's torch 2.13.0,
# the vLLM venv's, is a CUDA build that also runs on CPU), a rerun reuses it.  Only what SGLang's
# cache and scheduling modules import is installed, not its full dependency set (~200
# packages, torch 2.14.1, 11 GB); sglang itself goes in with --no-deps.  The same recipe by
# hand, and why: docs/sglang.md, "On a CPU".
# Then ttlpolicy (Rust core + Python package, from this checkout) and the adapter package
# (editable, which also registers its sglang.srt.plugins entry point) are installed into it;
# the Rust build has its own folder, target/venvs/<venv name> (as scripts/env.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
SGLANG_PIN="sglang==0.5.23"
install_sglang() {
  echo "==> (SGLang CPU test environment: several minutes and ~6 GB on a fresh machine)" >&2
  "$1/bin/python" -m pip install -q --no-deps -r "$ROOT/requirements/sglang.txt"
  "$1/bin/python" -m pip install -q --no-deps "$SGLANG_PIN"
}
engine_venv SGLANG_VENV sglang "$ROOT/requirements/sglang.txt" "$SGLANG_PIN" install_sglang "$ROOT/adapters/sglang"
