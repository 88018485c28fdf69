# Sourced by env.sh and vllm-env.sh: the cached-virtual-environment rule, in one place.
# cached_venv DIR INSTALL: reuse DIR when a complete venv is there; otherwise build it afresh
# and run INSTALL (a command or function, given DIR), then mark it complete. A build that
# fails half-way leaves no marker, so the next run starts over.
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3

cached_venv() {
  local dir=$1 install=$2
  if [ -x "$dir/bin/python" ] && [ -f "$dir/.complete" ]; then
    return 0
  fi
  echo "==> creating $dir" >&2
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip
  "$install" "$dir"
  touch "$dir/.complete"
}
