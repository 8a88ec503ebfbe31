# Sourced by record.sh and report.sh: pick_python CANDIDATE... sets PY to the first candidate
# (an interpreter, a virtualenv directory, or a name on PATH) that has torch. The driver needs
# torch only to read the case registry; the builds measured are whatever the arguments name.
# The scripts list this checkout's .venv (made by `make bench` where python3 has no torch) last.
# A look-up, not an import (1.3 s a script): a torch found that does not import (a develop build
# on PYTHONPATH without torchgen beside it) is one line from the script (errors.run_command).
pick_python() {
  local candidate path
  for candidate in "$@"; do
    [ -n "$candidate" ] || continue
    path=$candidate
    if [ -d "$candidate" ]; then path="$candidate/bin/python"; fi
    if command -v "$path" >/dev/null 2>&1 &&
       "$path" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null; then
      PY=$path
      return 0
    fi
  done
  return 1
}
