#!/usr/bin/env bash
# Install what the benchmark (or, with --test, the test suite) needs into the given Python.
# A torch that is already importable is never replaced: people benchmark their own builds.
set -euo pipefail
cd "$(dirname "$0")/.."
test_deps=0
if [ "${1:-}" = "--test" ]; then test_deps=1; shift; fi
PY=${1:-python3}
TORCH_PIN="torch==2.13.0"  # the CPU wheel this kind of machine has on disk; unpinned pulls GBs of CUDA

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install_deps: no interpreter '$PY'; pass PYTHON=/path/to/python" >&2
  exit 2
fi
if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "install_deps: using the torch already in $PY: $("$PY" -c 'import torch; print(torch.__version__)')" >&2
else
  echo "install_deps: no torch in $PY; installing $TORCH_PIN" >&2
  "$PY" -m pip install -q "$TORCH_PIN"
fi
[ "$test_deps" = 1 ] || exit 0

"$PY" -m pip install -q -r requirements-test.txt
