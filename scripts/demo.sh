#!/usr/bin/env bash
# The main job: set up (cached venv + build) and run ttlpolicy on the shipped sample sessions.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
ttlpolicy fit "$@"
