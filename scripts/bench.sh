#!/usr/bin/env bash
# Benchmarks, both backends side by side in one pytest-benchmark run.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
python -m pytest bench --benchmark-enable --benchmark-only --benchmark-columns=min,median,mean,ops,rounds "$@"
