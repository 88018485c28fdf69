#!/usr/bin/env bash
# The test command: builds the package into a cached venv and runs the whole pytest suite
# (both backends, differential tests, property tests). Extra arguments go to pytest.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
TTLPOLICY_REQUIRE_NATIVE=1 python -m pytest "$@"
