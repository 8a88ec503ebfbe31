#!/usr/bin/env bash
# scripts/report.sh BASE BRANCH [-o FILE.zip] [--all] [--no-flamegraphs]: compare two builds
# (recorded labels or interpreters) into a ZIP for the PR (see docs/pr-report.md). Exit 1 on a regression.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/pick_python.sh"
if ! pick_python "${PYTHON:-}" "${1:-}" "${2:-}" python3 "$root/.venv"; then
  echo "report.sh: error: no interpreter with torch to run the report; set PYTHON=/path/to/python (one that has torch)" >&2
  exit 2
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m overrides.review.pr_report "$@"
