#!/usr/bin/env bash
# Run a command beside one CPU-bound process per core (the project's own fault check: CI
# shares its machine with other work, and a test that only passes on a quiet machine blocks a
# good change). The hogs are pure-Python spin loops at normal priority, stopped when the
# command ends, however it ends. Usage: scripts/busy.sh COMMAND [ARGS...]; exits as COMMAND does.
set -u
if [ $# -eq 0 ]; then
    echo "busy.sh: error: give the command to run beside the hogs, e.g. scripts/busy.sh make test" >&2
    exit 2
fi
cores=$(nproc 2>/dev/null || echo 2)
hogs=()
stop() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null; }
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in $(seq "$cores"); do
    python3 -c "while True: pass" &
    hogs+=($!)
done
echo "busy.sh: $cores CPU-bound processes beside: $*" >&2
started=$(date +%s)
"$@"
status=$?
echo "busy.sh: exit $status after $(( $(date +%s) - started )) s beside $cores hogs" >&2
exit $status
