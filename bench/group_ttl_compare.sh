#!/usr/bin/env bash
# Group TTL vs best single global TTL vs LRU, at equal capacity, on the Mooncake conversation
# trace and on all agentic sessions (the claim of issue 4; figures in bench/RESULTS.md).
# Usage: bash bench/group_ttl_compare.sh [TRACES_DIR] [extra `ttlpolicy groups` options]
source "$(dirname "$0")/../scripts/env.sh"
cd "$ROOT"
TRACES="${1:-$ROOT/../shared/traces}"
shift || true
for trace in "$TRACES/mooncake/conversation_trace.jsonl.gz" "$TRACES/claude-code"; do
  echo "### ttlpolicy groups --trace $trace $*"
  ttlpolicy groups --trace "$trace" --no-progress "$@"
  echo
done
