"""Does counting use the machine? The counting phase of a comparison (two builds x N seeds, one
valgrind process per job) timed at 1, 2, ... CPUs (`taskset`), beside one job alone, against
ceil(jobs / CPUs) x one job's time; and what 8 and 32 CPUs would give.

    python benchmarks/count_scaling.py BASE BRANCH [--seeds 3] [--cpus 1 2]

BASE, BRANCH: interpreters or virtualenv folders with torch. Each setting runs in a child
process pinned with `taskset -c 0..k-1`, so `callgrind.count_jobs()` sees k CPUs, exactly as a
user's `taskset` would. The counts themselves are checked alike across settings (they are
deterministic), so only the wall time may differ.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.argtypes import positive_int  # noqa: E402
from overrides.builds.interpreters import resolve_interpreter  # noqa: E402
from overrides.errors import UsageError  # noqa: E402

CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
PROJECTED_CPUS = (8, 32)

_CHILD = """
import json, sys, time
from overrides.counts import callgrind
pythons, seeds = json.loads(sys.argv[1]), json.loads(sys.argv[2])
targets = [(case, "torch.add") for case in %r]
started = time.monotonic()
runs = callgrind.count_builds(pythons, targets, seeds)
print(json.dumps({"wall_s": time.monotonic() - started, "jobs_at_once": callgrind.count_jobs(),
                  "job_s": [run.wall_s for build in runs for run in build],
                  "counts": [[[c.per_call for c in run.cases] for run in build] for build in runs]}))
""" % (CASES,)


def timed(cpus: int, pythons: list[str], seeds: list[int]) -> dict:
    command = ["taskset", "-c", f"0-{cpus - 1}" if cpus > 1 else "0", sys.executable, "-c", _CHILD,
               json.dumps(pythons), json.dumps(seeds)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    if done.returncode != 0:
        sys.exit(f"count_scaling: the {cpus}-CPU run failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("branch")
    parser.add_argument("--seeds", type=positive_int, default=3, help="seeds per build (jobs = 2 x seeds)")
    parser.add_argument("--cpus", type=positive_int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    if not shutil.which("taskset"):
        parser.error("taskset not found; install util-linux (apt-get install util-linux)")
    available = len(os.sched_getaffinity(0))
    if max(args.cpus) > available:
        parser.error(f"--cpus {max(args.cpus)} asked, this machine gives {available}; ask for at most that")
    try:
        pythons = [resolve_interpreter(args.base), resolve_interpreter(args.branch)]
    except UsageError as error:
        parser.error(str(error))
    seeds = list(range(101, 101 + args.seeds))
    jobs = 2 * len(seeds)
    print(f"counting {len(CASES)} cases, {len(pythons)} builds x {len(seeds)} seeds = {jobs} jobs", file=sys.stderr)
    one = timed(1, pythons[:1], seeds[:1])
    job_s = one["wall_s"]
    rows, counts = [], None
    for cpus in args.cpus:
        print(f"  {cpus} CPU(s)...", file=sys.stderr, flush=True)
        started = time.monotonic()
        result = timed(cpus, pythons, seeds)
        if counts is not None and result["counts"] != counts:
            print("  the counts differ between settings: something other than code moved them", file=sys.stderr)
        counts = result["counts"]
        expected = math.ceil(jobs / cpus) * job_s
        rows.append((cpus, result["jobs_at_once"], result["wall_s"], expected, time.monotonic() - started))
    print(f"one job alone (1 build, 1 seed, {len(CASES)} cases): {job_s:.1f} s")
    print(f"{'CPUs':>5} {'at once':>8} {'wall s':>8} {'ceil(jobs/CPUs) x job':>22} {'ratio':>6}")
    for cpus, at_once, wall, expected, _ in rows:
        print(f"{cpus:>5} {at_once:>8} {wall:>8.1f} {expected:>22.1f} {wall / expected:>6.2f}")
    for cpus in PROJECTED_CPUS:
        rounds = math.ceil(jobs / cpus)
        print(f"{cpus:>5} {min(cpus, jobs):>8} {'':>8} {rounds * job_s:>22.1f}   (projected: {rounds} round(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
