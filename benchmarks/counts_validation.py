"""Do verdicts on instruction counts hold? Base against a bare-shim branch, and base against base.

Each comparison counts both builds under three hash seeds (matched between the builds; a new
set of seeds per comparison, so every comparison sees new layouts) and judges every seed case
with `overrides.counts.judge.compare_counts`, as `report.sh --instructions` does. Printed: how
often each case is flagged, the deltas, and the wall time per comparison.

Usage: python benchmarks/counts_validation.py [-n 5] [--size bare] [--save PATH]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.ab import shimenv  # noqa: E402
from overrides.counts import callgrind, judge, records  # noqa: E402
from overrides.files import write_json_atomic  # noqa: E402

CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
SEEDS_PER_COMPARISON = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="comparisons of each kind (default 5)")
    parser.add_argument("--size", default="bare", choices=list(shimenv.SHIM_WORK))
    parser.add_argument("--save", metavar="PATH", help="also write every run's repeats as JSON")
    args = parser.parse_args()
    targets = [(case, "torch.add") for case in CASES]
    branch = shimenv.make_shim_env(sys.executable, os.path.join(tempfile.mkdtemp(), args.size), args.size)
    rows = {kind: collections.defaultdict(list) for kind in ("A/A", "A/B")}
    per_seed = {kind: collections.defaultdict(list) for kind in rows}  # one layout's delta each
    raw = []
    walls = {kind: [] for kind in rows}
    for i in range(args.n):
        seeds = tuple(range(1 + SEEDS_PER_COMPARISON * i, 1 + SEEDS_PER_COMPARISON * (i + 1)))
        for kind, other in (("A/A", sys.executable), ("A/B", branch.python)):
            print(f"[{time.strftime('%H:%M:%S')}] {kind} {i + 1}/{args.n}, seeds {seeds}", file=sys.stderr)
            started = time.monotonic()
            base_runs, branch_runs = callgrind.count_builds([sys.executable, other], targets, seeds)
            walls[kind].append(time.monotonic() - started)
            for c in judge.compare_counts(base_runs, branch_runs):
                rows[kind][c.case].append(c)
            raw.append({"kind": kind, "base": records.to_dict(base_runs),
                        "branch": records.to_dict(branch_runs)})
            for a, b in zip(base_runs, branch_runs):
                for case in CASES:
                    per_seed[kind][case].append(b.get(case, "torch.add").per_call
                                                - a.get(case, "torch.add").per_call)
    if args.save:
        write_json_atomic(args.save, {"schema": "torch-function-overhead/counts-validation/1",
                                      "comparisons": raw})
    print(f"Verdicts on instruction counts: base vs base (A/A) and base vs the {args.size!r} shim "
          f"(A/B), {args.n} comparisons each, {SEEDS_PER_COMPARISON} matched hash seeds per comparison")
    for kind in rows:
        print(f"\n{kind}: wall per comparison median {statistics.median(walls[kind]):.0f} s")
        print(f"  {'case':22s} {'flagged':>8s} {'delta instr (median)':>21s} {'range':>16s} "
              f"{'CI width (median)':>18s} {'one seed: range':>16s}")
        for case in CASES:
            cs = rows[kind][case]
            flagged = sum(c.verdict in ("regression", "improvement") for c in cs)
            deltas = [c.delta for c in cs]
            widths = [c.ci95[1] - c.ci95[0] for c in cs if c.ci95]
            print(f"  {case:22s} {flagged:4d}/{len(cs):<3d} {statistics.median(deltas):21.0f} "
                  f"{min(deltas):7.0f}..{max(deltas):<7.0f} {statistics.median(widths):18.0f} "
                  f"{min(per_seed[kind][case]):7.0f}..{max(per_seed[kind][case]):<7.0f}")


if __name__ == "__main__":
    main()
