"""Is a clock change the set-up's? One pair of builds compared (clock only) under several ways of
placing their shared libraries, interleaved round by round.

    python benchmarks/gap_probe.py BASE BRANCH [-n ROUNDS] [--setups tmpfs disk inplace noviews]

Set-ups (overrides/builds/placement.py):
- `tmpfs`: the views, with the differing libraries copied anew for every pair onto tmpfs
  (/dev/shm), as `--compare` did before this probe;
- `disk`: the same, the copies on a disk's file system (`--compare` now: placement.copies_parent);
- `inplace`: the views, every differing library mapped from its own install (not copied);
- `noviews`: no views at all: each side imports torch as installed.
Prints each set-up's delta and 95% interval per case, per round, and the median over rounds.
Why: torch 2.12.1 -> 2.14.1 read SubTensor -534 ns with views and -62 ns without, with the
instruction counts at -162 (~-19 ns at this case's ns per instruction).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from overrides.ab.config import ABConfig  # noqa: E402
from overrides.ab.paired import run_ab  # noqa: E402
from overrides.builds import placement  # noqa: E402
from overrides.cases.casenames import SEED  # noqa: E402
from overrides.cases.ops import resolve_ops  # noqa: E402
from overrides.cases.registry import resolve_cases  # noqa: E402

SETUPS = ("tmpfs", "disk", "inplace", "noviews")


def run(setup: str, base: str, branch: str, say) -> dict:
    parent, gpu_only = placement.copies_parent, placement.GPU_ONLY
    try:
        if setup == "tmpfs":
            placement.copies_parent = lambda: ("/dev/shm", placement.file_system_of("/dev/shm"))
        elif setup == "inplace":
            placement.GPU_ONLY = re.compile(".")  # every differing library is left where it is
        config = ABConfig(match_placement=setup != "noviews")
        outcome = run_ab(base, branch, resolve_cases(None), resolve_ops(None), config, say)
    finally:
        placement.copies_parent, placement.GPU_ONLY = parent, gpu_only
    return {c.case: (c.delta_ns, c.ci95_ns) for c in outcome.comparisons}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("branch")
    parser.add_argument("-n", type=int, default=2, help="rounds (each runs every set-up once)")
    parser.add_argument("--setups", nargs="+", choices=SETUPS, default=list(SETUPS))
    args = parser.parse_args()
    say = lambda message: print(f"  {message}", file=sys.stderr)  # noqa: E731
    results: dict[str, list[dict]] = {setup: [] for setup in args.setups}
    for round_ in range(args.n):
        for setup in args.setups:
            print(f"round {round_ + 1}/{args.n}: {setup}", file=sys.stderr, flush=True)
            found = run(setup, args.base, args.branch, say)
            results[setup].append(found)
            print(f"round {round_ + 1} {setup:8s} " + "  ".join(
                f"{case} {delta:+.0f} [{ci[0]:+.0f}..{ci[1]:+.0f}]" if ci else f"{case} -"
                for case, (delta, ci) in found.items()), flush=True)
    print("\nmedian delta ns over rounds")
    for setup, rounds in results.items():
        print(f"  {setup:8s} " + "  ".join(
            f"{case} {statistics.median(r[case][0] for r in rounds):+.0f}" for case in (c.name for c in SEED)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
