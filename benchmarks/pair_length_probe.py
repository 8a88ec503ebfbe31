"""How long must a clock pair sample? The interval over pairs from each pair's whole 2.5 s, beside
the same pairs cut to their first part (issue 47: the clock's pairs are half an A/A's time).

A paired comparison's interval comes from the spread of its per-pair estimates (each the median
of a pair's round-by-round log ratios). That spread has two parts: the layout each pair draws
(process to process) and the sampling within a pair. If the layout's part dominates, a pair can
sample for less and the interval hardly widens. This probe runs comparisons of the four seed cases
without counts, then recomputes every pair's estimate from the first FRACTION of its rounds (the
same workers, the same layouts: a cut is what a shorter pair would have sampled), and prints, per
case and fraction, the median width of the 95% interval over the first 5 pairs (MIN_PAIRS, where
a comparison whose counts decide stops) as a ratio to the whole pairs' width, with the
between-pair sd and the within-pair standard error.

    python benchmarks/pair_length_probe.py [-n 3] [--pairs 5] [--kinds aa shim] [--work DIR]

aa: this interpreter against itself; shim: against the bare shim (a virtualenv of it,
overrides/ab/shimenv.py).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.ab import shimenv  # noqa: E402
from overrides.ab.config import ABConfig, MIN_PAIRS  # noqa: E402
from overrides.ab.paired import run_ab  # noqa: E402
from overrides.cases import seedcases  # noqa: E402
from overrides.cases.ops import DEFAULT_OP  # noqa: E402
from overrides.clock import stats  # noqa: E402

FRACTIONS = (1.0, 0.6, 0.4)


def per_pair(result, case: str, fraction: float) -> tuple[list[float], list[float]]:
    """Each pair's estimate from the first `fraction` of its rounds, and its standard error
    (from the rounds' spread: 1.2533 sd / sqrt(n), the median's for a normal sample)."""
    index = next(i for i, c in enumerate(result.base_run.results) if c.case == case)
    base = result.base_run.results[index].samples_ns
    branch = result.branch_run.results[index].samples_ns
    estimates, errors, at = [], [], 0
    for pair in sorted({e.pair for e in result.pairs}):
        (mine,) = [e for e in result.pairs if e.pair == pair and e.case == case]
        a, b = base[at:at + mine.samples], branch[at:at + mine.samples]
        at += mine.samples
        keep = max(2, int(len(a) * fraction))
        logs = [math.log(y / x) for x, y in zip(a[:keep], b[:keep])]
        estimates.append(statistics.median(logs))
        errors.append(1.2533 * statistics.stdev(logs) / math.sqrt(len(logs)))
    return estimates, errors


def half_width(logs: list[float]) -> float:
    return stats.t_quantile(0.95, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3, help="comparisons of each kind")
    parser.add_argument("--pairs", type=int, default=MIN_PAIRS)
    parser.add_argument("--kinds", nargs="+", default=["aa", "shim"], choices=["aa", "shim"])
    parser.add_argument("--work", default="/tmp/pair-length-probe")
    args = parser.parse_args()
    here = sys.executable
    other = {"aa": here}
    if "shim" in args.kinds:
        other["shim"] = shimenv.make_shim_env(here, os.path.join(args.work, "bare"), "bare").python
    config = ABConfig(pairs=args.pairs)
    widths = {}  # (kind, case, fraction) -> [ratio of half widths]
    spreads = {}  # (kind, case) -> [(between-pair sd, within-pair se at 1.0)]
    for run in range(args.n):
        for kind in args.kinds:
            started = time.monotonic()
            result = run_ab(here, other[kind], seedcases.SEED_CASES, [DEFAULT_OP], config)
            print(f"[{kind} {run + 1}/{args.n}: {time.monotonic() - started:.0f} s, load "
                  f"{os.getloadavg()[0]:.1f}]", file=sys.stderr)
            for case in (c.name for c in seedcases.SEED_CASES):
                whole, errors = per_pair(result, case, 1.0)
                spreads.setdefault((kind, case), []).append((statistics.stdev(whole), statistics.median(errors)))
                for fraction in FRACTIONS:
                    cut, _ = per_pair(result, case, fraction)
                    widths.setdefault((kind, case, fraction), []).append(half_width(cut) / half_width(whole))
    print(f"{args.n} comparisons of each kind, {args.pairs} pairs of {ABConfig().seconds_per_pair} s; "
          "the 95% interval's half width from each pair's first part, as a ratio of the whole pairs' "
          "(median over the comparisons), and the spreads in % (medians)")
    head = f"{'kind':5} {'case':22}" + "".join(f" {f'{f:.0%} of a pair':>14}" for f in FRACTIONS)
    print(head + f" {'between-pair sd %':>18} {'within-pair se %':>17}")
    for kind in args.kinds:
        for case in (c.name for c in seedcases.SEED_CASES):
            cells = "".join(f" {statistics.median(widths[kind, case, f]):>13.2f}x" for f in FRACTIONS)
            between = statistics.median(s for s, _ in spreads[kind, case]) * 100
            within = statistics.median(e for _, e in spreads[kind, case]) * 100
            print(f"{kind:5} {case:22}{cells} {between:>18.3f} {within:>17.3f}")


if __name__ == "__main__":
    main()
