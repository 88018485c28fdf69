# Sourced by env.sh and vllm-env.sh: the cached-virtual-environment rule, in one place.
# cached_venv DIR INSTALL: reuse DIR when a complete venv is there; otherwise build it afresh
# and run INSTALL (a command or function, given DIR), then mark it complete. A build that
# fails half-way leaves no marker, so the next run starts over.
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3

cached_venv() {
  local dir=$1 install=$2 t0=$SECONDS
  if [ -x "$dir/bin/python" ] && [ -f "$dir/.complete" ]; then
    return 0
  fi
  echo "==> first run: creating the virtual environment $dir" >&2
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip
  "$install" "$dir"
  touch "$dir/.complete"
  echo "==> $dir ready in $((SECONDS - t0)) s (reused from now on)" >&2
}

# pip_install PYTHON ARGS...: pip install with one line per package fetched, so that a long
# first install shows what it is doing (pip -q is silent for minutes; plain pip floods).
pip_install() {
  local py=$1
  shift
  "$py" -m pip install --progress-bar off "$@" 2>&1 |
    { grep --line-buffered -E '^ *(Collecting|Downloading|Installing collected|Successfully|ERROR)' |
      sed -u -e 's/^Installing collected packages:.*/  installing (unpacking the downloads).../' \
        -e 's/^Successfully installed.*/  done/' -e 's/^ *\(Collecting\|Downloading\)/  \1/' \
        >&2 || true; }
}
