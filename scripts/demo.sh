#!/usr/bin/env bash
# The main job: set up (cached venv + build) and compare KV-cache policies on the shipped
# sample sessions (Llama-3.1-8B on one H100, 2 to 16 programs in flight): one table per load,
# a legend, and a last line, the verdict, computed from the tables (docs/simulate.md, "What the
# demo shows").  The first run builds the venv and the Rust core (81 s on a fresh machine,
# 4 min on a loaded 2-core one); after that, ~4 s.
# Extra arguments go to `ttlpolicy compare` (e.g. --trace DIR --model llama-3.1-70b).
source "$(dirname "$0")/env.sh"
cd "$ROOT"
ttlpolicy compare --concurrency 4 --sweep "$@"
