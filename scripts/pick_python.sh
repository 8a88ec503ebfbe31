# Sourced by record.sh and report.sh: pick_python CANDIDATE... sets PY to the first candidate
# (an interpreter, a virtualenv directory, or a name on PATH) that imports torch. The driver
# needs torch only to read the case registry; the builds measured are whatever the arguments
# name. A real import, not a look-up: with a develop build on PYTHONPATH an interpreter finds
# `torch` without the packages it needs (torchgen, ...), and its traceback was the whole output.
# The scripts list this checkout's .venv (made by `make bench` where python3 has no torch) last.
pick_python() {
  local candidate path
  for candidate in "$@"; do
    [ -n "$candidate" ] || continue
    path=$candidate
    if [ -d "$candidate" ]; then path="$candidate/bin/python"; fi
    if command -v "$path" >/dev/null 2>&1 && "$path" -c "import torch" >/dev/null 2>&1; then
      PY=$path
      return 0
    fi
  done
  return 1
}
