#!/usr/bin/env bash
# scripts/record.sh --label LABEL [--python PY] [--seconds S] [CASE ...]: measure one build and
# record its flamegraphs into runs/LABEL/ (see docs/pr-report.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/pick_python.sh"
given=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --python) given="${args[$((i + 1))]:-}" ;;
    --python=*) given="${args[$i]#--python=}" ;;
  esac
done
if ! pick_python "${PYTHON:-}" "$given" python3 "$root/.venv"; then
  echo "record.sh: error: no interpreter with torch among: ${PYTHON:-} $given python3 $root/.venv; pass --python PY (an interpreter or virtualenv that has torch)" >&2
  exit 2
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m overrides.review.record "$@"
