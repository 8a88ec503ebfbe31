"""Which statistic of the per-call samples is stable across invocations? The evidence for p2.

Runs `python bench.py --json` K times (fresh processes, one after another) and, from the very
same samples, computes each candidate headline statistic: min, p1, p2, p5, p10, p25, median and the
mean of the fastest 10%. For each case and candidate it prints the spread across the K
invocations ((max - min) / median) and the coefficient of variation. The headline should be
the candidate with the least spread that does not rest on a handful of samples.

Usage: python benchmarks/headline_stats.py [-k 6] [--bench-args "--min-time 3"] [--keep DIR]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides import results  # noqa: E402
from overrides.clock import stats  # noqa: E402

FLOOR = 1.03  # a sample within 3% of the run's fastest counts as undisturbed

CANDIDATES = {
    "min": min,
    "p1": lambda v: stats.quantile(v, 0.01),
    "p2 (headline)": lambda v: stats.quantile(v, 0.02),
    "p5": lambda v: stats.quantile(v, 0.05),
    "p10 (first headline)": lambda v: stats.quantile(v, 0.10),
    "p25": lambda v: stats.quantile(v, 0.25),
    "median": stats.median,
    "mean fastest 10%": lambda v: statistics.mean(sorted(v)[: max(1, len(v) // 10)]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=int, default=6, help="invocations of bench.py (default 6)")
    parser.add_argument("--bench-args", default="", help="extra arguments for bench.py")
    parser.add_argument("--keep", metavar="DIR", help="keep (or reuse, if it holds *.json) the runs here")
    args = parser.parse_args()

    folder = args.keep or tempfile.mkdtemp(prefix="headline-")
    os.makedirs(folder, exist_ok=True)
    paths = sorted(glob.glob(os.path.join(folder, "*.json")))
    if not paths:
        for i in range(args.k):
            print(f"[{i + 1}/{args.k}] bench.py ...", file=sys.stderr, flush=True)
            path = os.path.join(folder, f"run{i:02d}.json")
            subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "-q", "--json", path,
                            *args.bench_args.split()], check=True, stdout=subprocess.DEVNULL)
            paths.append(path)
    runs = [results.load(p) for p in paths]

    print(f"Spread of candidate headline statistics across {len(runs)} invocations of bench.py")
    print(f"{'case':22s} {'statistic':20s} {'median ns':>10s} {'spread %':>9s} {'CV %':>6s}")
    for index, first in enumerate(runs[0].results):
        for name, statistic in CANDIDATES.items():
            values = [statistic(run.results[index].samples_ns) for run in runs]
            spread = 100 * (max(values) - min(values)) / statistics.median(values)
            cv = 100 * statistics.stdev(values) / statistics.mean(values)
            print(f"{first.case:22s} {name:20s} {statistics.median(values):10.0f} {spread:9.2f} {cv:6.2f}")
    # Why a low quantile can slide: how many samples reach the undisturbed floor at all.
    print(f"\n{'case':22s} {'samples within 3% of the fastest, per run':>44s}")
    for index, first in enumerate(runs[0].results):
        shares = []
        for run in runs:
            samples = run.results[index].samples_ns
            shares.append(sum(v <= FLOOR * min(samples) for v in samples) / len(samples))
        print(f"{first.case:22s} {' '.join(f'{share:5.0%}' for share in shares):>44s}")
    print(f"\nruns kept in {folder}")


if __name__ == "__main__":
    main()
